/*
 * config.c — model_config from a Hugging Face Llama config.json (see
 * config.h).
 *
 * Called once per process by the model loader before any weight is read,
 * so a checkpoint we cannot run is refused up front with the offending
 * field named, instead of producing garbage tokens later. Defaults follow
 * transformers' LlamaConfig so that minimal configs load the same way they
 * do in Python.
 */
#include "config.h"
#include "sl.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Integer field that must be > 0. */
static int get_pos(const cfg_ctx *c, const cJSON *obj, const char *prefix,
		   const char *key, int required, int *out)
{
	int rc = get_int(c, obj, prefix, key, required, out);
	if (!rc && *out <= 0)
		rc = sl_errf(c->err, c->errlen, SL_EINVAL, "%s: %s%s must be positive, got %d",
			     c->name, prefix, key, *out);
	return rc;
}

/* Number field that must be > 0 (eps, theta, rope factors). */
static int get_posf(const cfg_ctx *c, const cJSON *obj, const char *prefix,
		    const char *key, int required, float *out)
{
	const cJSON *j = field(obj, key);
	if (!j)
		return required ? missing(c, prefix, key) : SL_OK;
	if (!cJSON_IsNumber(j))
		return bad_type(c, prefix, key, "a number", j);
	if (!(j->valuedouble > 0) || !isfinite((float)j->valuedouble))
		return sl_errf(c->err, c->errlen, SL_EINVAL, "%s: %s%s must be positive, got %g",
			       c->name, prefix, key, j->valuedouble);
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
	if ((rc = get_pos(c, root, "", "hidden_size", 1, &m->dim)) ||
	    (rc = get_pos(c, root, "", "intermediate_size", 1, &m->hidden_dim)) ||
	    (rc = get_pos(c, root, "", "num_hidden_layers", 1, &m->n_layers)) ||
	    (rc = get_pos(c, root, "", "num_attention_heads", 1, &m->n_heads)) ||
	    (rc = get_pos(c, root, "", "vocab_size", 1, &m->vocab_size)) ||
	    (rc = get_pos(c, root, "", "max_position_embeddings", 0, &m->max_pos)))
		return rc;
	m->n_kv_heads = m->n_heads;
	if ((rc = get_pos(c, root, "", "num_key_value_heads", 0, &m->n_kv_heads)))
		return rc;
	if (m->n_heads % m->n_kv_heads)
		return sl_errf(c->err, c->errlen, SL_ENOTSUP, "%s: num_attention_heads %d is not "
			       "a multiple of num_key_value_heads %d", c->name, m->n_heads,
			       m->n_kv_heads);
	if (field(root, "head_dim"))
		return get_pos(c, root, "", "head_dim", 0, &m->head_dim);
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

/* bos_token_id: an int; eos_token_id: an int or a list of ints. */
static int parse_tokens(const cfg_ctx *c, const cJSON *root, model_config *m)
{
	const cJSON *bos = field(root, "bos_token_id"), *eos = field(root, "eos_token_id");
	int rc;
	m->bos_id = -1;
	if (bos && (rc = token_id(c, "bos_token_id", bos, &m->bos_id)))
		return rc;
	if (!eos)
		return SL_OK;
	if (!cJSON_IsArray(eos)) {
		m->n_eos = 1;
		return token_id(c, "eos_token_id", eos, &m->eos_ids[0]);
	}
	if (cJSON_GetArraySize(eos) > MODEL_MAX_EOS)
		return sl_errf(c->err, c->errlen, SL_ENOTSUP, "%s: eos_token_id lists %d ids, at "
			       "most %d are supported", c->name, cJSON_GetArraySize(eos),
			       MODEL_MAX_EOS);
	const cJSON *e;
	cJSON_ArrayForEach(e, eos) {
		if ((rc = token_id(c, "eos_token_id", e, &m->eos_ids[m->n_eos++])))
			return rc;
	}
	return SL_OK;
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
	    (rc = get_pos(c, rs, prefix, "original_max_position_embeddings", 1,
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
