/*
 * mkckpt.c — shardline-mkckpt: writes a random Llama checkpoint of any
 * shape as a Hugging Face folder (config.json + model.safetensors), for
 * demos, tests and benchmarks. Same seed, same bytes.
 */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/args.h"
#include "common/version.h"
#include "formats/safetensors.h"
#include "formats/st_writer.h"
#include "common/rng.h"
#include "common/sl.h"

typedef struct ck_args {
	const char *out;
	long dim, hidden, layers, heads, kv_heads, vocab, max_pos;
	double theta, std;
	int tie;
	sl_dtype dtype;
	uint64_t seed;
} ck_args;

/* Uniform with standard deviation `std` around `mean`. */
static void fill_random(float *v, size_t n, float mean, float std, uint64_t *rng)
{
	float a = std * sqrtf(3.0f);
	for (size_t i = 0; i < n; i++) {
		float u = sl_rng_unit(rng);
		v[i] = mean + a * (2 * u - 1);
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: shardline-mkckpt --out DIR [--dim 64] [--hidden 172] [--layers 2]\n"
		   "       [--heads 4] [--kv-heads 2] [--vocab 256] [--max-pos 2048]\n"
		   "       [--rope-theta 10000] [--dtype f32|f16|bf16] [--tie] [--seed 1] [--std 0.05]\n");
}

static int parse(int argc, char **argv, ck_args *a, char *err, size_t errlen)
{
	static const struct option o[] = {
		{"out", 1, 0, 'o'}, {"dim", 1, 0, 'd'}, {"hidden", 1, 0, 'H'}, {"layers", 1, 0, 'l'},
		{"heads", 1, 0, 'h'}, {"kv-heads", 1, 0, 'k'}, {"vocab", 1, 0, 'v'},
		{"max-pos", 1, 0, 'p'}, {"rope-theta", 1, 0, 't'}, {"dtype", 1, 0, 'D'},
		{"tie", 0, 0, 'T'}, {"seed", 1, 0, 's'}, {"std", 1, 0, 'S'}, {"help", 0, 0, '?'},
		{0, 0, 0, 0}};
	*a = (ck_args){.dim = 64, .hidden = 172, .layers = 2, .heads = 4, .kv_heads = 2,
		       .vocab = 256, .max_pos = 2048, .theta = 10000, .std = 0.05, .seed = 1};
	int c, rc = 0;
	while (!rc && (c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (c) {
		case 'o': a->out = optarg; break;
		case 'd': rc = sl_parse_int("--dim", optarg, 2, 1 << 16, &a->dim, err, errlen); break;
		case 'H': rc = sl_parse_int("--hidden", optarg, 1, 1 << 18, &a->hidden, err, errlen); break;
		case 'l': rc = sl_parse_int("--layers", optarg, 1, 1024, &a->layers, err, errlen); break;
		case 'h': rc = sl_parse_int("--heads", optarg, 1, 1024, &a->heads, err, errlen); break;
		case 'k': rc = sl_parse_int("--kv-heads", optarg, 1, 1024, &a->kv_heads, err, errlen); break;
		case 'v': rc = sl_parse_int("--vocab", optarg, 2, 1 << 20, &a->vocab, err, errlen); break;
		case 'p': rc = sl_parse_int("--max-pos", optarg, 1, 1 << 22, &a->max_pos, err, errlen); break;
		case 't': rc = sl_parse_float("--rope-theta", optarg, 1, 1e9, &a->theta, err, errlen); break;
		case 'S': rc = sl_parse_float("--std", optarg, 0, 10, &a->std, err, errlen); break;
		case 's': rc = sl_parse_u64("--seed", optarg, &a->seed, err, errlen); break;
		case 'T': a->tie = 1; break;
		case 'D': {
			const char *names[] = {"f32", "f16", "bf16"};
			int k = 0;
			while (k < 3 && strcmp(optarg, names[k]))
				k++;
			if (k == 3)
				return sl_errf(err, errlen, SL_EINVAL, "--dtype: '%s' is not f32, f16 or bf16", optarg);
			a->dtype = (sl_dtype)k;
			break;
		}
		default: usage(stderr); return sl_errf(err, errlen, SL_EINVAL, "bad arguments");
		}
	}
	if (!rc && !a->out)
		rc = sl_errf(err, errlen, SL_EINVAL, "--out DIR is required");
	if (!rc && (a->dim % a->heads || a->heads % a->kv_heads || (a->dim / a->heads) % 2))
		rc = sl_errf(err, errlen, SL_EINVAL,
			     "--heads must divide --dim into an even head_dim, --kv-heads must divide --heads");
	return rc;
}

static int write_config(const ck_args *a, char *err, size_t errlen)
{
	static const char *dt[] = {"float32", "float16", "bfloat16"};
	cJSON *j = cJSON_CreateObject();
	cJSON_AddItemToObject(j, "architectures", cJSON_CreateStringArray((const char *[]){"LlamaForCausalLM"}, 1));
	cJSON_AddStringToObject(j, "model_type", "llama");
	cJSON_AddNumberToObject(j, "hidden_size", a->dim);
	cJSON_AddNumberToObject(j, "intermediate_size", a->hidden);
	cJSON_AddNumberToObject(j, "num_hidden_layers", a->layers);
	cJSON_AddNumberToObject(j, "num_attention_heads", a->heads);
	cJSON_AddNumberToObject(j, "num_key_value_heads", a->kv_heads);
	cJSON_AddNumberToObject(j, "vocab_size", a->vocab);
	cJSON_AddNumberToObject(j, "max_position_embeddings", a->max_pos);
	cJSON_AddNumberToObject(j, "rms_norm_eps", 1e-5);
	cJSON_AddNumberToObject(j, "rope_theta", a->theta);
	cJSON_AddBoolToObject(j, "tie_word_embeddings", a->tie);
	cJSON_AddNumberToObject(j, "bos_token_id", 1);
	cJSON_AddNumberToObject(j, "eos_token_id", 2);
	cJSON_AddStringToObject(j, "hidden_act", "silu");
	cJSON_AddStringToObject(j, "torch_dtype", dt[a->dtype]);
	char *txt = cJSON_Print(j), path[4096];
	cJSON_Delete(j);
	int rc = sl_path_join(path, sizeof path, a->out, "config.json");
	FILE *f = rc ? NULL : fopen(path, "w");
	if (!f || fputs(txt, f) < 0)
		rc = sl_errf(err, errlen, SL_EIO, "cannot write %s/config.json", a->out);
	if (f && fclose(f))
		rc = sl_errf(err, errlen, SL_EIO, "cannot write %s/config.json", a->out);
	free(txt);
	return rc;
}

typedef struct desc_list {
	sl_st_desc *d;
	char **names;
	int n;
	sl_dtype dtype;
} desc_list;

/* rows == 0: a vector of `cols`. */
static void add_desc(desc_list *L, const char *name, long rows, long cols)
{
	sl_st_desc *d = &L->d[L->n];
	L->names[L->n] = strdup(name);
	d->name = L->names[L->n];
	d->dtype = L->dtype;
	d->ndim = rows ? 2 : 1;
	d->shape[0] = rows ? rows : cols;
	d->shape[1] = cols;
	L->n++;
}

/* The tensor list in Hugging Face's names and shapes. */
static int make_descs(const ck_args *a, desc_list *L)
{
	int cap = 2 + 9 * (int)a->layers + !a->tie;
	L->d = calloc(cap, sizeof *L->d);
	L->names = calloc(cap, sizeof *L->names);
	L->n = 0;
	L->dtype = a->dtype;
	if (!L->d || !L->names)
		return SL_ENOMEM;
	long hd = a->dim / a->heads, q = a->heads * hd, kv = a->kv_heads * hd;
	add_desc(L, "model.embed_tokens.weight", a->vocab, a->dim);
	for (long l = 0; l < a->layers; l++) {
		static const char *sfx[] = {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
					    "self_attn.v_proj", "self_attn.o_proj",
					    "post_attention_layernorm", "mlp.gate_proj",
					    "mlp.up_proj", "mlp.down_proj"};
		long rows[] = {0, q, kv, kv, a->dim, 0, a->hidden, a->hidden, a->dim};
		long cols[] = {a->dim, a->dim, a->dim, a->dim, q, a->dim, a->dim, a->dim, a->hidden};
		for (int i = 0; i < 9; i++) {
			char b[160];
			snprintf(b, sizeof b, "model.layers.%ld.%s.weight", l, sfx[i]);
			add_desc(L, b, rows[i], cols[i]);
		}
	}
	add_desc(L, "model.norm.weight", 0, a->dim);
	if (!a->tie)
		add_desc(L, "lm_head.weight", a->vocab, a->dim);
	return SL_OK;
}

static int write_weights(const ck_args *a, char *err, size_t errlen)
{
	desc_list L = {0};
	char path[4096];
	sl_st_writer *w = NULL;
	int rc = make_descs(a, &L);
	if (rc)
		rc = sl_errf(err, errlen, SL_ENOMEM, "out of memory");
	else
		rc = sl_path_join(path, sizeof path, a->out, "model.safetensors");
	sl_st_desc *d = L.d;
	int n = L.n;
	if (!rc)
		rc = sl_st_writer_open(path, n, d, &w, err, errlen);
	uint64_t rng = a->seed;
	for (int i = 0; !rc && i < n; i++) {
		size_t cnt = d[i].ndim == 1 ? (size_t)d[i].shape[0] : (size_t)d[i].shape[0] * d[i].shape[1];
		float *f = malloc(cnt * sizeof(float));
		void *o = malloc(cnt * sl_dtype_size(a->dtype));
		if (!f || !o)
			rc = sl_errf(err, errlen, SL_ENOMEM, "out of memory");
		else {
			int is_norm = d[i].ndim == 1;
			fill_random(f, cnt, is_norm ? 1.0f : 0.0f, is_norm ? 0.1f : (float)a->std, &rng);
			sl_convert(o, a->dtype, f, SL_DT_F32, cnt);
			rc = sl_st_writer_put(w, o, cnt * sl_dtype_size(a->dtype), err, errlen);
		}
		free(f);
		free(o);
	}
	if (w) {
		int rc2 = sl_st_writer_close(w, err, errlen);
		rc = rc ? rc : rc2;
	}
	for (int i = 0; i < n; i++)
		free(L.names[i]);
	free(L.names);
	free(L.d);
	return rc;
}

int main(int argc, char **argv)
{
	if (sl_version_asked(argc, argv, "shardline-mkckpt"))
		return 0;
	char err[SL_ERRLEN] = "";
	ck_args a;
	sl_log_set_role("mkckpt", 0, 1);
	int rc = parse(argc, argv, &a, err, sizeof err);
	if (!rc && mkdir(a.out, 0755) && access(a.out, W_OK))
		rc = sl_errf(err, sizeof err, SL_EIO, "cannot create %s", a.out);
	if (!rc)
		rc = write_config(&a, err, sizeof err);
	if (!rc)
		rc = write_weights(&a, err, sizeof err);
	if (rc) {
		fprintf(stderr, "shardline-mkckpt: %s\n", err);
		return 1;
	}
	SL_INFO("mkckpt", "wrote %s (dim %ld, %ld layers, vocab %ld, %s)", a.out, a.dim, a.layers,
		a.vocab, sl_dtype_name(a.dtype));
	return 0;
}
