/*
 * model_meta.c -- a model's tokenizer, stop tokens and chat template, from
 * a tokenizer.json and the Hugging Face files beside it, or from a GGUF
 * file.  See model_meta.h for the sources and their order.
 *
 * Owner: coordinator.  Callers: coord.c.
 *
 * Files beside a tokenizer.json are optional; one that exists but does
 * not parse is an error naming it (a silently ignored generation_config
 * would make a chat model run on past its turn).
 */
#include "coordinator/model_meta.h"
#include "common/checks.h"
#include "formats/gguf.h"
#include "common/sl.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void add_eos(coord_model_meta *m, int64_t id, const char *from)
{
	if (id < 0 || id >= text_tok_vocab_size(m->tok)) {
		if (id >= 0)
			SL_WARN("coord", "%s: EOS id %lld is outside the vocabulary, ignored", from,
				(long long)id);
		return;
	}
	for (int i = 0; i < m->n_eos; i++)
		if (m->eos[i] == id)
			return;
	if (m->n_eos == COORD_META_MAX_EOS)
		return;
	m->eos[m->n_eos++] = (int32_t)id;
	if (!strstr(m->eos_from, from)) {
		size_t n = strlen(m->eos_from);
		snprintf(m->eos_from + n, sizeof m->eos_from - n, "%s%s", n ? ", " : "", from);
	}
}

/* ---- beside a tokenizer.json ---- */

/* dir/name parsed, or NULL with rc 0 when the file does not exist. */
static int read_json(const char *dir, const char *name, cJSON **out, char *err, size_t errlen)
{
	char path[4096], *buf = NULL;
	size_t len;

	*out = NULL;
	snprintf(path, sizeof path, "%s/%s", dir, name);
	if (access(path, F_OK) != 0)
		return 0;
	TRY(sl_read_file(path, &buf, &len, err, errlen));
	*out = cJSON_ParseWithLength(buf, len);
	free(buf);
	if (!*out)
		return sl_errf(err, errlen, SL_EINVAL, "%s: not valid JSON", path);
	return 0;
}

/* eos_token_id: an integer or a list of them. */
static void eos_ids_from(coord_model_meta *m, const cJSON *root, const char *from)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "eos_token_id"), *it;
	if (cJSON_IsNumber(v))
		add_eos(m, (int64_t)v->valuedouble, from);
	else if (cJSON_IsArray(v))
		cJSON_ArrayForEach(it, v)
			if (cJSON_IsNumber(it))
				add_eos(m, (int64_t)it->valuedouble, from);
}

/* A special token in tokenizer_config.json: "<s>" or {"content": "<s>"}. */
static char *token_string(const cJSON *root, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
	if (cJSON_IsObject(v))
		v = cJSON_GetObjectItemCaseSensitive(v, "content");
	return cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
}

/* chat_template: a string, or [{"name": ..., "template": ...}] -- "default"
 * if present, else the first. */
static char *chat_template(const cJSON *root)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "chat_template"), *it, *pick = NULL;
	if (cJSON_IsString(v))
		return strdup(v->valuestring);
	if (!cJSON_IsArray(v))
		return NULL;
	cJSON_ArrayForEach(it, v) {
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
		if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(it, "template")))
			continue;
		if (!pick || (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0))
			pick = it;
	}
	return pick ? strdup(cJSON_GetObjectItemCaseSensitive(pick, "template")->valuestring) : NULL;
}

static int load_hf_folder(coord_model_meta *m, const char *path, char *err, size_t errlen)
{
	char dir[4096];
	const char *slash = strrchr(path, '/');
	cJSON *gen = NULL, *cfg = NULL, *tcfg = NULL;
	int rc;

	snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
	if ((rc = read_json(dir, "generation_config.json", &gen, err, errlen)) ||
	    (rc = read_json(dir, "config.json", &cfg, err, errlen)) ||
	    (rc = read_json(dir, "tokenizer_config.json", &tcfg, err, errlen)))
		goto out;
	eos_ids_from(m, gen, "generation_config.json");
	eos_ids_from(m, cfg, "config.json");
	m->eos_token = token_string(tcfg, "eos_token");
	m->bos_token = token_string(tcfg, "bos_token");
	if (m->eos_token)
		add_eos(m, text_tok_token_to_id(m->tok, m->eos_token), "tokenizer_config.json");
	if ((m->chat_template = chat_template(tcfg)))
		snprintf(m->template_from, sizeof m->template_from, "tokenizer_config.json");
out:
	cJSON_Delete(gen);
	cJSON_Delete(cfg);
	cJSON_Delete(tcfg);
	return rc;
}

/* ---- a GGUF file ---- */

static char *token_at(const coord_model_meta *m, int64_t id)
{
	const char *s = id >= 0 && id < INT32_MAX ? text_tok_id_to_token(m->tok, (int32_t)id) : NULL;
	return s ? strdup(s) : NULL;
}

static int load_gguf(coord_model_meta *m, const char *path, char *err, size_t errlen)
{
	static const char *const keys[] = {"tokenizer.ggml.eos_token_id",
					   "tokenizer.ggml.eot_token_id",
					   "tokenizer.ggml.eom_token_id"};
	sl_gguf *g;
	sl_gguf_str s;
	int64_t id;
	char e[SL_ERRLEN];

	TRY(sl_gguf_open(path, &g, err, errlen));
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (sl_gguf_get_i64(g, keys[i], &id, e, sizeof e) == 0)
			add_eos(m, id, keys[i] + strlen("tokenizer.ggml."));
	if (sl_gguf_get_i64(g, "tokenizer.ggml.eos_token_id", &id, e, sizeof e) == 0)
		m->eos_token = token_at(m, id);
	if (sl_gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &id, e, sizeof e) == 0)
		m->bos_token = token_at(m, id);
	if (sl_gguf_get_str(g, "tokenizer.chat_template", &s, e, sizeof e) == 0 &&
	    (m->chat_template = malloc(s.n + 1))) {
		memcpy(m->chat_template, s.p, s.n);
		m->chat_template[s.n] = 0;
		snprintf(m->template_from, sizeof m->template_from, "tokenizer.chat_template");
	}
	sl_gguf_close(g);
	return 0;
}

int coord_model_meta_load(const char *path, coord_model_meta **out, char *err, size_t errlen)
{
	coord_model_meta *m = calloc(1, sizeof *m);
	int rc;

	*out = NULL;
	if (!m)
		return sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	rc = text_tok_load(path, &m->tok, err, errlen);
	if (!rc)
		rc = text_tok_is_gguf(path) ? load_gguf(m, path, err, errlen)
					     : load_hf_folder(m, path, err, errlen);
	if (!rc && m->n_eos == 0)
		add_eos(m, text_tok_eos_id(m->tok), "the tokenizer's own </s>-like token");
	if (!rc && !m->eos_token && m->n_eos)
		m->eos_token = token_at(m, m->eos[0]);
	if (rc) {
		coord_model_meta_destroy(m);
		return rc;
	}
	*out = m;
	return 0;
}

void coord_model_meta_destroy(coord_model_meta *m)
{
	if (!m)
		return;
	text_tok_destroy(m->tok);
	free(m->bos_token);
	free(m->eos_token);
	free(m->chat_template);
	free(m);
}
