/*
 * config.c — model_config from a Hugging Face Llama config.json (plus
 * generation_config.json's EOS ids) or from a GGUF file's metadata (see
 * config.h).
 *
 * Called once per process by the model loader before any weight is read,
 * so a checkpoint we cannot run is refused up front with the offending
 * field named, instead of producing garbage tokens later. Defaults follow
 * transformers' LlamaConfig so that minimal configs load the same way they
 * do in Python; for GGUF they follow llama.cpp's reading of the same keys.
 */
#include "formats/config.h"
#include "common/checks.h"
#include "common/sl.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Upper bounds of size fields, from config.json and GGUF alike: widths
 * (hidden, FFN, vocabulary) and counts (layers, heads, head size). */
#define CFG_MAX_WIDTH (1 << 24)
#define CFG_MAX_COUNT 65536

/* Where fields are read from, and where errors go. */
typedef struct cfg_ctx {
	const char *name;     /* file name for messages */
	char *err;
	size_t errlen;
} cfg_ctx;

static const char *json_type_name(const cJSON *j)
{
	if (cJSON_IsString(j)) return "a string";
	if (cJSON_IsBool(j)) return "a boolean";
	if (cJSON_IsNumber(j)) return "a number";
	if (cJSON_IsArray(j)) return "an array";
	if (cJSON_IsObject(j)) return "an object";
	return "null";
}

/* The field, or NULL when it is absent or null (both mean "default"). */
static const cJSON *field(const cJSON *obj, const char *key)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
	return cJSON_IsNull(j) ? NULL : j;
}

static int bad_type(const cfg_ctx *c, const char *prefix, const char *key,
		    const char *want, const cJSON *j)
{
	return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: %s%s must be %s, got %s",
		       c->name, prefix, key, want, json_type_name(j));
}

static int missing(const cfg_ctx *c, const char *prefix, const char *key)
{
	return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: missing required field %s%s",
		       c->name, prefix, key);
}

static int json_is_int(const cJSON *j)
{
	if (!cJSON_IsNumber(j))
		return 0;
	double d = j->valuedouble;
	return d == floor(d) && d >= INT_MIN && d <= INT_MAX;
}

/* Integer field; absent or null keeps *out (the default) unless required. */
static int get_int(const cfg_ctx *c, const cJSON *obj, const char *prefix,
		   const char *key, int required, int *out)
{
	const cJSON *j = field(obj, key);
	if (!j)
		return required ? missing(c, prefix, key) : SL_OK;
	if (!json_is_int(j))
		return bad_type(c, prefix, key, "an integer", j);
	*out = (int)j->valuedouble;
	return SL_OK;
}

/* Integer field in [1, max]. The bounds are the GGUF reader's (below):
 * sizes that fit an int can still overflow the products of shard and
 * buffer arithmetic (a vocab_size of 2^31 - 1 did, in parallel/grid.c). */
static int get_pos(const cfg_ctx *c, const cJSON *obj, const char *prefix,
		   const char *key, int required, int max, int *out)
{
	int rc = get_int(c, obj, prefix, key, required, out);
	if (!rc && (*out <= 0 || *out > max))
		rc = sl_errf(c->err, c->errlen, SL_EINVAL, "%s: %s%s must be from 1 to %d, got %d",
			     c->name, prefix, key, max, *out);
	return rc;
}

/* A positive number that stays positive and finite as a normal float:
 * 1e-205 is > 0 as a double but 0.0f once stored, and a denormal eps or
 * rope factor turns into inf when divided by. */
static int posf_ok(double v) { return v >= FLT_MIN && v <= FLT_MAX; }

/* Number field that must be > 0 (eps, theta, rope factors). */
static int get_posf(const cfg_ctx *c, const cJSON *obj, const char *prefix,
		    const char *key, int required, float *out)
{
	const cJSON *j = field(obj, key);
	if (!j)
		return required ? missing(c, prefix, key) : SL_OK;
	if (!cJSON_IsNumber(j))
		return bad_type(c, prefix, key, "a number", j);
	if (!posf_ok(j->valuedouble))
		return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: %s%s must be a positive number "
			       "from %g to %g (a float), got %g", c->name, prefix, key,
			       (double)FLT_MIN, (double)FLT_MAX, j->valuedouble);
	*out = (float)j->valuedouble;
	return SL_OK;
}

static int get_bool(const cfg_ctx *c, const cJSON *obj, const char *key, int *out)
{
	const cJSON *j = field(obj, key);
	if (!j)
		return SL_OK;
	if (!cJSON_IsBool(j))
		return bad_type(c, "", key, "true or false", j);
	*out = cJSON_IsTrue(j);
	return SL_OK;
}

/* String field; absent or null leaves *out NULL. */
static int get_str(const cfg_ctx *c, const cJSON *obj, const char *prefix,
		   const char *key, const char **out)
{
	const cJSON *j = field(obj, key);
	*out = NULL;
	if (!j)
		return SL_OK;
	if (!cJSON_IsString(j))
		return bad_type(c, prefix, key, "a string", j);
	*out = j->valuestring;
	return SL_OK;
}

static int unsupported(const cfg_ctx *c, const char *key, const char *why)
{
	return sl_errf(c->err, c->errlen, SL_ENOTSUP, "%s: %s %s is not supported "
		       "(Llama only)", c->name, key, why);
}

/* Refuses other architectures and Llama variants with extra weights or a
 * different activation: their tensors would load but compute the wrong
 * function. */
static int check_arch(const cfg_ctx *c, const cJSON *root)
{
	const char *s;
	int b = 0, rc;
	if ((rc = get_str(c, root, "", "model_type", &s)))
		return rc;
	if (s && strcmp(s, "llama"))
		return unsupported(c, "model_type", s);
	if ((rc = get_str(c, root, "", "hidden_act", &s)))
		return rc;
	if (s && strcmp(s, "silu"))
		return unsupported(c, "hidden_act", s);
	if ((rc = get_bool(c, root, "attention_bias", &b)))
		return rc;
	if (b)
		return unsupported(c, "attention_bias", "true");
	if ((rc = get_bool(c, root, "mlp_bias", &b)))
		return rc;
	if (b)
		return unsupported(c, "mlp_bias", "true");
	return SL_OK;
}

static int parse_sizes(const cfg_ctx *c, const cJSON *root, model_config *m)
{
	int rc;
	if ((rc = get_pos(c, root, "", "hidden_size", 1, CFG_MAX_WIDTH, &m->dim)) ||
	    (rc = get_pos(c, root, "", "intermediate_size", 1, CFG_MAX_WIDTH, &m->hidden_dim)) ||
	    (rc = get_pos(c, root, "", "num_hidden_layers", 1, CFG_MAX_COUNT, &m->n_layers)) ||
	    (rc = get_pos(c, root, "", "num_attention_heads", 1, CFG_MAX_COUNT, &m->n_heads)) ||
	    (rc = get_pos(c, root, "", "vocab_size", 1, CFG_MAX_WIDTH, &m->vocab_size)) ||
	    (rc = get_pos(c, root, "", "max_position_embeddings", 0, INT_MAX, &m->max_pos)))
		return rc;
	m->n_kv_heads = m->n_heads;
	if ((rc = get_pos(c, root, "", "num_key_value_heads", 0, CFG_MAX_COUNT, &m->n_kv_heads)))
		return rc;
	if (m->n_heads % m->n_kv_heads)
		return sl_errf(c->err, c->errlen, SL_ENOTSUP, "%s: num_attention_heads %d is not "
			       "a multiple of num_key_value_heads %d", c->name, m->n_heads,
			       m->n_kv_heads);
	if (field(root, "head_dim"))
		return get_pos(c, root, "", "head_dim", 0, CFG_MAX_COUNT, &m->head_dim);
	if (m->dim % m->n_heads)
		return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: hidden_size %d is not a "
			       "multiple of num_attention_heads %d and head_dim is not given",
			       c->name, m->dim, m->n_heads);
	m->head_dim = m->dim / m->n_heads;
	return SL_OK;
}

static int token_id(const cfg_ctx *c, const char *key, const cJSON *j, int *out)
{
	if (!json_is_int(j) || j->valuedouble < 0)
		return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: %s must hold non-negative "
			       "integers, got %s", c->name, key, json_type_name(j));
	*out = (int)j->valuedouble;
	return SL_OK;
}

/* Adds an EOS id unless it is already there. */
static int add_eos(model_config *m, int id, const char *name, const char *key, char *err,
		   size_t errlen)
{
	for (int k = 0; k < m->n_eos; k++)
		if (m->eos_ids[k] == id)
			return SL_OK;
	if (m->n_eos == MODEL_MAX_EOS)
		return sl_errf(err, errlen, SL_ENOTSUP, "%s: %s: more than %d distinct EOS ids "
			       "are not supported", name, key, MODEL_MAX_EOS);
	m->eos_ids[m->n_eos++] = id;
	return SL_OK;
}

/* eos_token_id: an int or a list of ints, added to m's EOS ids. */
static int parse_eos(const cfg_ctx *c, const cJSON *eos, model_config *m)
{
	int rc, id;
	if (!cJSON_IsArray(eos)) {
		if ((rc = token_id(c, "eos_token_id", eos, &id)))
			return rc;
		return add_eos(m, id, c->name, "eos_token_id", c->err, c->errlen);
	}
	const cJSON *e;
	cJSON_ArrayForEach(e, eos) {
		if ((rc = token_id(c, "eos_token_id", e, &id)) ||
		    (rc = add_eos(m, id, c->name, "eos_token_id", c->err, c->errlen)))
			return rc;
	}
	return SL_OK;
}

/* bos_token_id: an int; eos_token_id: an int or a list of ints. */
static int parse_tokens(const cfg_ctx *c, const cJSON *root, model_config *m)
{
	const cJSON *bos = field(root, "bos_token_id"), *eos = field(root, "eos_token_id");
	int rc;
	m->bos_id = -1;
	if (bos && (rc = token_id(c, "bos_token_id", bos, &m->bos_id)))
		return rc;
	return eos ? parse_eos(c, eos, m) : SL_OK;
}

/* torch_dtype, renamed "dtype" by newer transformers. */
static int parse_dtype(const cfg_ctx *c, const cJSON *root, model_config *m)
{
	const char *key = field(root, "torch_dtype") ? "torch_dtype" : "dtype", *s;
	int rc = get_str(c, root, "", key, &s);
	if (rc || !s)
		return rc;
	int dt = sl_dtype_parse(s);
	if (dt < 0)
		return sl_errf(c->err, c->errlen, SL_ENOTSUP, "%s: %s %s is not supported "
			       "(float32, float16, bfloat16)", c->name, key, s);
	m->dtype = (sl_dtype)dt;
	return SL_OK;
}

static int parse_llama3_rope(const cfg_ctx *c, const cJSON *rs, const char *prefix,
			     model_config *m)
{
	int rc;
	if ((rc = get_posf(c, rs, prefix, "factor", 1, &m->rope_factor)) ||
	    (rc = get_posf(c, rs, prefix, "low_freq_factor", 1, &m->rope_low_freq_factor)) ||
	    (rc = get_posf(c, rs, prefix, "high_freq_factor", 1, &m->rope_high_freq_factor)) ||
	    (rc = get_pos(c, rs, prefix, "original_max_position_embeddings", 1, INT_MAX,
			  &m->rope_orig_max_pos)))
		return rc;
	/* the llama3 smoothing divides by (high - low) */
	if (m->rope_high_freq_factor <= m->rope_low_freq_factor)
		return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: %shigh_freq_factor must be "
			       "greater than %slow_freq_factor", c->name, prefix, prefix);
	m->rope = ROPE_LLAMA3;
	return SL_OK;
}

/* rope_scaling (transformers <= 4.x) or rope_parameters (5.x, which also
 * carries rope_theta): absent, "default" or "llama3". */
static int parse_rope(const cfg_ctx *c, const cJSON *root, model_config *m)
{
	const char *key = field(root, "rope_scaling") ? "rope_scaling" : "rope_parameters";
	const cJSON *rs = field(root, key);
	char prefix[32];
	const char *type = NULL;
	int rc;
	m->rope = ROPE_DEFAULT;
	if (!rs)
		return SL_OK;
	snprintf(prefix, sizeof prefix, "%s.", key);
	if (!cJSON_IsObject(rs))
		return bad_type(c, "", key, "an object or null", rs);
	if (!field(root, "rope_theta") &&
	    (rc = get_posf(c, rs, prefix, "rope_theta", 0, &m->rope_theta)))
		return rc;
	const char *tkey = field(rs, "rope_type") ? "rope_type" : "type";
	if ((rc = get_str(c, rs, prefix, tkey, &type)))
		return rc;
	if (!type)
		return missing(c, prefix, "rope_type");
	if (!strcmp(type, "default"))
		return SL_OK;
	if (!strcmp(type, "llama3"))
		return parse_llama3_rope(c, rs, prefix, m);
	return sl_errf(c->err, c->errlen, SL_ENOTSUP, "%s: %s%s %s is not supported "
		       "(default and llama3 only)", c->name, prefix, tkey, type);
}

static int parse_root(const cfg_ctx *c, const cJSON *root, model_config *m)
{
	int rc;
	if ((rc = check_arch(c, root)) || (rc = parse_sizes(c, root, m)) ||
	    (rc = get_posf(c, root, "", "rms_norm_eps", 0, &m->norm_eps)) ||
	    (rc = get_posf(c, root, "", "rope_theta", 0, &m->rope_theta)) ||
	    (rc = get_bool(c, root, "tie_word_embeddings", &m->tie_embeddings)) ||
	    (rc = parse_tokens(c, root, m)) || (rc = parse_dtype(c, root, m)))
		return rc;
	return parse_rope(c, root, m);
}

int model_config_parse(const char *json, const char *name, model_config *out,
		       char *err, size_t errlen)
{
	cfg_ctx c = {name ? name : "config.json", err, errlen};
	model_config m = {
		.max_pos = 2048, .norm_eps = 1e-6f, .rope_theta = 10000.0f,
		.bos_id = -1, .dtype = SL_DT_F32, .rope = ROPE_DEFAULT,
	};
	const char *end = NULL;
	cJSON *root = json ? cJSON_ParseWithOpts(json, &end, 1) : NULL;
	int rc;
	if (!root)
		rc = sl_errf(err, errlen, SL_EINVAL, "%s: not valid JSON (near byte %lld)", c.name,
			     json && end ? (long long)(end - json) : -1LL);
	else if (!cJSON_IsObject(root))
		rc = sl_errf(err, errlen, SL_EINVAL, "%s: not a JSON object", c.name);
	else
		rc = parse_root(&c, root, &m);
	cJSON_Delete(root);
	if (!rc)
		*out = m;
	return rc;
}

int model_config_load(const char *path, model_config *out, char *err, size_t errlen)
{
	char *text = NULL;
	int rc = sl_read_file(path, &text, NULL, err, errlen);
	if (!rc)
		rc = model_config_parse(text, path, out, err, errlen);
	free(text);
	return rc;
}

/* ---- generation_config.json ---- */

int model_config_parse_generation(const char *json, const char *name, model_config *m,
				  char *err, size_t errlen)
{
	cfg_ctx c = {name ? name : "generation_config.json", err, errlen};
	const char *end = NULL;
	cJSON *root = json ? cJSON_ParseWithOpts(json, &end, 1) : NULL;
	model_config t = *m; /* m is left as it was on error */
	int rc = SL_OK;
	if (!root)
		rc = sl_errf(err, errlen, SL_EINVAL, "%s: not valid JSON (near byte %lld)", c.name,
			     json && end ? (long long)(end - json) : -1LL);
	else if (!cJSON_IsObject(root))
		rc = sl_errf(err, errlen, SL_EINVAL, "%s: not a JSON object", c.name);
	else if (field(root, "eos_token_id"))
		rc = parse_eos(&c, field(root, "eos_token_id"), &t);
	cJSON_Delete(root);
	if (!rc)
		*m = t;
	return rc;
}

int model_config_load_dir(const char *dir, model_config *out, char *err, size_t errlen)
{
	char path[4096];
	struct stat st;
	/* a model path that is not there (a mistyped model.gguf, say) is
	 * named itself, not as PATH/config.json */
	if (stat(dir, &st))
		return sl_errf(err, errlen, SL_ENOTFOUND, "%s: %s", dir, strerror(errno));
	if (sl_path_join(path, sizeof path, dir, "config.json"))
		return sl_errf(err, errlen, SL_EINVAL, "model path too long: %s", dir);
	TRY(model_config_load(path, out, err, errlen));
	sl_path_join(path, sizeof path, dir, "generation_config.json");
	if (stat(path, &st) != 0 && errno == ENOENT)
		return SL_OK;
	char *text = NULL;
	int rc = sl_read_file(path, &text, NULL, err, errlen);
	if (!rc)
		rc = model_config_parse_generation(text, path, out, err, errlen);
	free(text);
	return rc;
}

int model_config_load_path(const char *path, model_config *out, char *err, size_t errlen)
{
	if (!model_path_is_file(path))
		return model_config_load_dir(path, out, err, errlen);
	sl_gguf *g;
	TRY(sl_gguf_open(path, &g, err, errlen));
	int rc = model_config_from_gguf(g, out, err, errlen);
	sl_gguf_close(g);
	return rc;
}

int model_path_is_file(const char *path)
{
	struct stat st;
	return path && stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---- GGUF ---- */

/* Where GGUF keys are read from, and where errors go. */
typedef struct gguf_ctx {
	const sl_gguf *g;
	const char *path;
	char *err;
	size_t errlen;
} gguf_ctx;

/* An integer key in [lo, hi]; absent keeps *out unless required. */
static int gguf_int(const gguf_ctx *c, const char *key, int required, int64_t lo, int64_t hi,
		    int *out)
{
	int64_t v;
	int rc = sl_gguf_get_i64(c->g, key, &v, c->err, c->errlen);
	if (rc == SL_ENOTFOUND && !required)
		return SL_OK;
	if (rc == SL_ENOTFOUND)
		return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: missing required key %s", c->path,
			       key);
	if (rc)
		return rc;
	if (v < lo || v > hi)
		return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: key %s is %lld, expected %lld to "
			       "%lld", c->path, key, (long long)v, (long long)lo, (long long)hi);
	*out = (int)v;
	return SL_OK;
}

/* A positive finite number; absent keeps *out unless required. */
static int gguf_posf(const gguf_ctx *c, const char *key, int required, float *out)
{
	double v;
	int rc = sl_gguf_get_f64(c->g, key, &v, c->err, c->errlen);
	if (rc == SL_ENOTFOUND && !required)
		return SL_OK;
	if (rc == SL_ENOTFOUND)
		return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: missing required key %s", c->path,
			       key);
	if (rc)
		return rc;
	if (!posf_ok(v))
		return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: key %s must be a positive number "
			       "from %g to %g (a float), got %g", c->path, key, (double)FLT_MIN,
			       (double)FLT_MAX, v);
	*out = (float)v;
	return SL_OK;
}

/* A string key compared with `want`; absent is 0 (no match). */
static int gguf_str_is(const sl_gguf *g, const char *key, const char *want)
{
	sl_gguf_str s;
	char e[8];
	return !sl_gguf_get_str(g, key, &s, e, sizeof e) && s.n == strlen(want) &&
	       !memcmp(s.p, want, s.n);
}

/* llama only; anything that loads the same tensors but computes another
 * function (biases, experts) is refused. */
static int gguf_check_arch(const gguf_ctx *c)
{
	sl_gguf_str s;
	TRY(sl_gguf_get_str(c->g, "general.architecture", &s, c->err, c->errlen));
	if (!gguf_str_is(c->g, "general.architecture", "llama"))
		return sl_errf(c->err, c->errlen, SL_ENOTSUP, "%s: general.architecture %.*s is not "
			       "supported (llama only)", c->path, (int)(s.n > 64 ? 64 : s.n), s.p);
	int experts = 0;
	TRY(gguf_int(c, "llama.expert_count", 0, 0, INT_MAX, &experts));
	if (experts > 0)
		return sl_errf(c->err, c->errlen, SL_ENOTSUP, "%s: llama.expert_count %d: mixture "
			       "of experts is not supported", c->path, experts);
	static const char *biases[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias",
				       "attn_output.bias", "ffn_up.bias", "ffn_down.bias"};
	for (size_t i = 0; i < sizeof biases / sizeof biases[0]; i++) {
		char name[64];
		snprintf(name, sizeof name, "blk.0.%s", biases[i]);
		if (sl_gguf_find_tensor(c->g, name))
			return sl_errf(c->err, c->errlen, SL_ENOTSUP, "%s: tensor %s: biases are not "
				       "supported (Llama only)", c->path, name);
	}
	return SL_OK;
}

static int gguf_sizes(const gguf_ctx *c, model_config *m)
{
	const int big = CFG_MAX_WIDTH, count = CFG_MAX_COUNT;
	TRY(gguf_int(c, "llama.block_count", 1, 1, count, &m->n_layers));
	TRY(gguf_int(c, "llama.embedding_length", 1, 1, big, &m->dim));
	TRY(gguf_int(c, "llama.feed_forward_length", 1, 1, big, &m->hidden_dim));
	TRY(gguf_int(c, "llama.attention.head_count", 1, 1, count, &m->n_heads));
	m->n_kv_heads = m->n_heads;
	TRY(gguf_int(c, "llama.attention.head_count_kv", 0, 1, count, &m->n_kv_heads));
	TRY(gguf_int(c, "llama.context_length", 0, 1, INT_MAX, &m->max_pos));
	if (m->n_heads % m->n_kv_heads)
		return sl_errf(c->err, c->errlen, SL_ENOTSUP, "%s: llama.attention.head_count %d is "
			       "not a multiple of llama.attention.head_count_kv %d", c->path,
			       m->n_heads, m->n_kv_heads);
	/* head_dim: key_length, else dim / heads (as llama.cpp reads them);
	 * the rotary width and value length must agree, since the engine
	 * rotates whole heads */
	int kl = 0, vl = 0, rot = 0;
	TRY(gguf_int(c, "llama.attention.key_length", 0, 1, 65536, &kl));
	TRY(gguf_int(c, "llama.attention.value_length", 0, 1, 65536, &vl));
	TRY(gguf_int(c, "llama.rope.dimension_count", 0, 1, 65536, &rot));
	if (!kl && m->dim % m->n_heads)
		return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: llama.embedding_length %d is not a "
			       "multiple of llama.attention.head_count %d and "
			       "llama.attention.key_length is not given", c->path, m->dim, m->n_heads);
	m->head_dim = kl ? kl : m->dim / m->n_heads;
	if ((vl && vl != m->head_dim) || (rot && rot != m->head_dim) || m->head_dim % 2)
		return sl_errf(c->err, c->errlen, SL_ENOTSUP, "%s: head size %d, "
			       "llama.attention.value_length %d and llama.rope.dimension_count %d "
			       "must be one even number (partial rotary is not supported)", c->path,
			       m->head_dim, vl, rot);
	return SL_OK;
}

/* rope.freq_base, rope.scaling.{type,factor} (or the older
 * rope.scale_linear), and a rope_freqs.weight tensor. */
static int gguf_rope(const gguf_ctx *c, model_config *m)
{
	TRY(gguf_posf(c, "llama.rope.freq_base", 0, &m->rope_theta));
	m->rope = ROPE_DEFAULT;
	m->rope_factor = 1.0f;
	const char *tkey = "llama.rope.scaling.type";
	sl_gguf_str s;
	int rc = sl_gguf_get_str(c->g, tkey, &s, c->err, c->errlen);
	if (rc && rc != SL_ENOTFOUND)
		return rc;
	if (!rc && !gguf_str_is(c->g, tkey, "none") && !gguf_str_is(c->g, tkey, "linear"))
		return sl_errf(c->err, c->errlen, SL_ENOTSUP, "%s: %s %.*s is not supported (none "
			       "and linear only)", c->path, tkey, (int)(s.n > 32 ? 32 : s.n), s.p);
	if (!rc && gguf_str_is(c->g, tkey, "linear"))
		TRY(gguf_posf(c, "llama.rope.scaling.factor", 1, &m->rope_factor));
	else if (rc == SL_ENOTFOUND)
		TRY(gguf_posf(c, "llama.rope.scale_linear", 0, &m->rope_factor));
	if (m->rope_factor != 1.0f)
		m->rope = ROPE_LINEAR;
	m->rope_freqs = sl_gguf_find_tensor(c->g, "rope_freqs.weight") != NULL;
	return SL_OK;
}

/* vocabulary: the token list's length, else llama.vocab_size, else the
 * embedding's rows; ties: output.weight absent. */
static int gguf_vocab(const gguf_ctx *c, model_config *m)
{
	sl_gguf_vtype et;
	uint64_t n;
	int rc = sl_gguf_get_arr(c->g, "tokenizer.ggml.tokens", &et, &n, c->err, c->errlen);
	if (rc && rc != SL_ENOTFOUND)
		return rc;
	if (!rc) {
		if (n < 1 || n > (1u << 24))
			return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: tokenizer.ggml.tokens lists "
				       "%llu tokens (1 to 2^24)", c->path, (unsigned long long)n);
		m->vocab_size = (int)n;
	} else {
		TRY(gguf_int(c, "llama.vocab_size", 0, 1, 1 << 24, &m->vocab_size));
		const sl_gguf_tensor *t = sl_gguf_find_tensor(c->g, "token_embd.weight");
		if (!m->vocab_size && t && t->ne[1] > 0 && t->ne[1] <= (1 << 24))
			m->vocab_size = (int)t->ne[1];
		if (!m->vocab_size)
			return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: no vocabulary size: neither "
				       "tokenizer.ggml.tokens, llama.vocab_size nor token_embd.weight",
				       c->path);
	}
	m->tie_embeddings = sl_gguf_find_tensor(c->g, "output.weight") == NULL;
	return SL_OK;
}

/* BOS, and every id that ends a turn: eos, eot (Llama 3's <|eot_id|>) and
 * eom, each checked against the vocabulary. */
static int gguf_tokens(const gguf_ctx *c, model_config *m)
{
	static const char *eos_keys[] = {"tokenizer.ggml.eos_token_id",
					 "tokenizer.ggml.eot_token_id",
					 "tokenizer.ggml.eom_token_id"};
	m->bos_id = -1;
	TRY(gguf_int(c, "tokenizer.ggml.bos_token_id", 0, 0, m->vocab_size - 1, &m->bos_id));
	for (size_t i = 0; i < sizeof eos_keys / sizeof eos_keys[0]; i++) {
		int id = -1;
		TRY(gguf_int(c, eos_keys[i], 0, 0, m->vocab_size - 1, &id));
		if (id >= 0)
			TRY(add_eos(m, id, c->path, eos_keys[i], c->err, c->errlen));
	}
	return SL_OK;
}

/* What the GPU should store: the matrices' own precision when it is one
 * it can hold, fp16 for quantized ones. */
static sl_dtype gguf_dtype(const sl_gguf *g)
{
	const sl_gguf_tensor *t = sl_gguf_find_tensor(g, "blk.0.ffn_up.weight");
	if (t && t->type == SL_GGML_F32)
		return SL_DT_F32;
	if (t && t->type == SL_GGML_BF16)
		return SL_DT_BF16;
	return SL_DT_F16;
}

int model_config_from_gguf(const sl_gguf *g, model_config *out, char *err, size_t errlen)
{
	gguf_ctx c = {g, sl_gguf_file_path(g, 0), err, errlen};
	model_config m = {
		.max_pos = 2048, .norm_eps = 1e-5f, .rope_theta = 10000.0f,
		.bos_id = -1, .rope = ROPE_DEFAULT,
	};
	if (!g)
		return sl_errf(err, errlen, SL_EINVAL, "no GGUF file");
	TRY(gguf_check_arch(&c));
	TRY(gguf_sizes(&c, &m));
	TRY(gguf_posf(&c, "llama.attention.layer_norm_rms_epsilon", 1, &m.norm_eps));
	TRY(gguf_rope(&c, &m));
	TRY(gguf_vocab(&c, &m));
	TRY(gguf_tokens(&c, &m));
	m.dtype = gguf_dtype(g);
	*out = m;
	return SL_OK;
}
