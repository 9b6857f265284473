/*
 * chat_template.c — the chat-template module's public face (chat_template.h):
 * compiling a template (normalize, check UTF-8, lex, parse), rendering it
 * (the render's limits, the messages and globals a template sees, then
 * tmpl_exec), and its lifetime.  A template is compiled once per model and
 * rendered per chat request (today tests/unit/text/test_chat_template.c is the
 * only caller).  This is the top of the module's layers and the only file
 * that sees the public types: the layers below work on a tmpl_program and
 * a tmpl_ctx (chat_template_int.h).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/jinja/chat_template.h"
#include "text/jinja/chat_template_int.h"
#include "common/sl.h"
#include "text/utf8.h"

/* The public handle only hides the compiled program; immutable once built,
 * so any number of renders may share it. */
struct text_tmpl {
	tmpl_program prog;
};

/* ---- compile ---- */

/* Jinja reads "\r\n" and "\r" as "\n" and drops one trailing newline. */
static char *normalize(tmpl_arena *a, const char *src, size_t len, size_t *out_len)
{
	char *s = tmpl_alloc(a, len + 1);
	size_t k = 0;
	if (!s)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		if (src[i] == '\r') {
			s[k++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		} else {
			s[k++] = src[i];
		}
	}
	if (k && s[k - 1] == '\n')
		k--;
	s[k] = 0;
	*out_len = k;
	return s;
}

int text_tmpl_compile(const char *src, size_t len, const char *name, text_tmpl **out,
		       char *err, size_t errlen)
{
	*out = NULL;
	if (!name)
		name = "chat_template";
	if (len > COORD_TMPL_MAX_SOURCE)
		return sl_errf(err, errlen, SL_EINVAL, "%s: chat template of %zu bytes exceeds %u",
			       name, len, COORD_TMPL_MAX_SOURCE);
	size_t bad = text_utf8_first_bad(src, len);
	if (bad < len)
		return sl_errf(err, errlen, SL_EINVAL,
			       "%s: chat template is not valid UTF-8 (byte %zu)", name, bad);
	text_tmpl *t = calloc(1, sizeof *t);
	if (!t || !(t->prog.name = strdup(name))) {
		free(t);
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", name);
	}
	size_t n;
	char *s = normalize(&t->prog.arena, src, len, &n);
	tmpl_toks toks;
	int rc = SL_ENOMEM;
	if (!s) {
		sl_errf(err, errlen, rc, "%s: out of memory", name);
		goto fail;
	}
	t->prog.src = s;
	if ((rc = tmpl_lex(s, n, t->prog.name, &t->prog.arena, &toks, err, errlen)))
		goto fail;
	if ((rc = tmpl_parse(&t->prog, &toks, err, errlen)))
		goto fail;
	*out = t;
	return 0;
fail:
	if (rc == SL_ENOMEM)
		sl_errf(err, errlen, rc, "%s: out of memory", name);
	text_tmpl_destroy(t);
	return rc;
}

void text_tmpl_destroy(text_tmpl *t)
{
	if (!t)
		return;
	tmpl_arena_free(&t->prog.arena);
	free(t->prog.name);
	free(t);
}

int text_tmpl_iterates_content(const text_tmpl *t)
{
	return t ? t->prog.iterates_content : 0;
}

/* ---- render ---- */

static tmpl_val str_or_undef(const char *s, const char *name)
{
	return s ? tv_str(s, strlen(s)) : tv_undef(name);
}

/* A JSON value as the template sees what Python's json.loads made of it:
 * objects are dicts in their order, whole numbers ints, others floats.
 * Strings point into j, which outlives the render.  -1: out of memory or
 * nested deeper than 64. */
static int json_val(tmpl_ctx *c, const cJSON *j, int depth, tmpl_val *out)
{
	if (depth > 64)
		return -1;
	if (cJSON_IsNull(j)) {
		*out = tv_none();
	} else if (cJSON_IsBool(j)) {
		*out = tv_bool(cJSON_IsTrue(j));
	} else if (cJSON_IsNumber(j)) {
		double d = j->valuedouble;
		if (d == floor(d) && fabs(d) < 9007199254740992.0) {
			*out = tv_int((int64_t)d);
		} else {
			*out = tv_none();
			out->k = V_FLOAT;
			out->u.f = d;
		}
	} else if (cJSON_IsString(j)) {
		*out = tv_str(j->valuestring, strlen(j->valuestring));
	} else if (cJSON_IsArray(j)) {
		tmpl_list *l = tl_new(c, cJSON_GetArraySize(j));
		const cJSON *it;
		int i = 0;
		if (!l)
			return -1;
		cJSON_ArrayForEach(it, j)
			if (json_val(c, it, depth + 1, &l->it[i++]))
				return -1;
		out->k = V_LIST;
		out->u.l = l;
	} else if (cJSON_IsObject(j)) {
		tmpl_dict *d = td_new(c, cJSON_GetArraySize(j) + 1);
		const cJSON *it;
		if (!d)
			return -1;
		cJSON_ArrayForEach(it, j) {
			tmpl_val v;
			if (json_val(c, it, depth + 1, &v) ||
			    td_set(c, d, tv_str(it->string, strlen(it->string)), v))
				return -1;
		}
		out->k = V_DICT;
		out->u.d = d;
	} else {
		return -1;
	}
	return 0;
}

/* The parsed JSON inputs of one render (tools, messages' extras), freed
 * after it. */
typedef struct {
	cJSON *tools;
	cJSON **extra;
	int n;
} render_json;

static void render_json_free(render_json *rj)
{
	cJSON_Delete(rj->tools);
	for (int i = 0; rj->extra && i < rj->n; i++)
		cJSON_Delete(rj->extra[i]);
	free(rj->extra);
}

/* Parses tools_json and each extra_json, checking their shapes. */
static int parse_json_inputs(const tmpl_program *p, const text_chat_msg *msgs, int n,
			     const text_tmpl_vars *vars, render_json *rj, char *err,
			     size_t errlen)
{
	if (vars->tools_json) {
		rj->tools = cJSON_ParseWithLength(vars->tools_json, vars->tools_len);
		if (!cJSON_IsArray(rj->tools))
			return sl_errf(err, errlen, SL_EINVAL, "%s: tools is not a JSON array", p->name);
	}
	if (!(rj->extra = calloc((size_t)n + 1, sizeof *rj->extra)))
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", p->name);
	rj->n = n;
	for (int i = 0; i < n; i++) {
		if (!msgs[i].extra_json)
			continue;
		rj->extra[i] = cJSON_ParseWithLength(msgs[i].extra_json, msgs[i].extra_len);
		if (!cJSON_IsObject(rj->extra[i]))
			return sl_errf(err, errlen, SL_EINVAL,
				       "%s: the extra fields of message %d are not a JSON object",
				       p->name, i);
	}
	return 0;
}

static int build_messages(tmpl_ctx *c, const text_chat_msg *msgs, int n, const render_json *rj,
			  tmpl_val *out)
{
	tmpl_list *l = tl_new(c, n);
	if (!l)
		return -1;
	for (int i = 0; i < n; i++) {
		const text_chat_msg *m = &msgs[i];
		const cJSON *extra = rj->extra[i];
		tmpl_dict *d = td_new(c, 2 + (extra ? cJSON_GetArraySize(extra) : 0));
		tmpl_val content = tv_none();
		if (!d)
			return -1;
		if (m->parts) {
			tmpl_list *parts = tl_new(c, m->n_parts);
			if (!parts)
				return -1;
			for (int j = 0; j < m->n_parts; j++) {
				tmpl_dict *p = td_new(c, 2);
				const text_chat_part *cp = &m->parts[j];
				if (!p || td_set(c, p, tv_str("type", 4), str_or_undef(cp->type, NULL)) ||
				    td_set(c, p, tv_str("text", 4),
					   tv_str(cp->text ? cp->text : "", cp->text_len)))
					return -1;
				parts->it[j].k = V_DICT;
				parts->it[j].u.d = p;
			}
			content.k = V_LIST;
			content.u.l = parts;
		} else if (m->content) {
			content = tv_str(m->content, m->content_len);
		}
		if (td_set(c, d, tv_str("role", 4), str_or_undef(m->role ? m->role : "", NULL)) ||
		    td_set(c, d, tv_str("content", 7), content))
			return -1;
		const cJSON *x;
		cJSON_ArrayForEach(x, extra) {
			tmpl_val v;
			if (!strcmp(x->string, "role") || !strcmp(x->string, "content"))
				continue;
			if (json_val(c, x, 0, &v) ||
			    td_set(c, d, tv_str(x->string, strlen(x->string)), v))
				return -1;
		}
		l->it[i].k = V_DICT;
		l->it[i].u.d = d;
	}
	out->k = V_LIST;
	out->u.l = l;
	return 0;
}

static int define_globals(tmpl_ctx *c, const text_chat_msg *msgs, int n,
			  const text_tmpl_vars *vars, const render_json *rj)
{
	static const struct {
		const char *name;
		int fn;
	} fns[] = {
		{"raise_exception", FN_RAISE_EXCEPTION}, {"strftime_now", FN_STRFTIME_NOW},
		{"namespace", FN_NAMESPACE}, {"range", FN_RANGE}, {"dict", FN_DICT},
	};
	tmpl_val messages, tools = tv_none();
	if (tmpl_scope_push(c) || build_messages(c, msgs, n, rj, &messages) ||
	    (rj->tools && json_val(c, rj->tools, 0, &tools)))
		return -1;
	for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
		tmpl_val f = {.k = V_FUNC};
		f.u.i = fns[i].fn;
		if (tmpl_scope_set(c, fns[i].name, strlen(fns[i].name), f))
			return -1;
	}
	if (tmpl_scope_set(c, "messages", 8, messages) || tmpl_scope_set(c, "tools", 5, tools) ||
	    tmpl_scope_set(c, "documents", 9, tv_none()) ||
	    tmpl_scope_set(c, "add_generation_prompt", 21, tv_bool(vars->add_generation_prompt)))
		return -1;
	if (vars->bos_token && tmpl_scope_set(c, "bos_token", 9, str_or_undef(vars->bos_token, NULL)))
		return -1;
	if (vars->eos_token && tmpl_scope_set(c, "eos_token", 9, str_or_undef(vars->eos_token, NULL)))
		return -1;
	if (vars->date_string &&
	    tmpl_scope_set(c, "date_string", 11, str_or_undef(vars->date_string, NULL)))
		return -1;
	return tmpl_scope_push(c);  /* the template's own top-level scope */
}

int text_tmpl_render(const text_tmpl *t, const text_chat_msg *msgs, int n,
		      const text_tmpl_vars *vars, char **out, size_t *len, char *err,
		      size_t errlen)
{
	static const text_tmpl_vars none = {0};
	*out = NULL;
	*len = 0;
	if (!vars)
		vars = &none;
	if (!t)
		return sl_errf(err, errlen, SL_EINVAL, "no chat template");
	if (n < 0 || (n && !msgs))
		return sl_errf(err, errlen, SL_EINVAL, "%s: bad message list", t->prog.name);
	tmpl_ctx c = {.prog = &t->prog, .err = err, .errlen = errlen};
	c.arena.limit = vars->max_memory_bytes ? vars->max_memory_bytes
					       : COORD_TMPL_DEFAULT_MAX_MEMORY;
	c.out_limit = vars->max_output_bytes ? vars->max_output_bytes
					     : COORD_TMPL_DEFAULT_MAX_OUTPUT;
	c.step_limit = vars->max_steps ? vars->max_steps : COORD_TMPL_DEFAULT_MAX_STEPS;
	c.now_unix = vars->now_unix ? vars->now_unix : (int64_t)time(NULL);
	render_json rj = {0};
	int rc = parse_json_inputs(&t->prog, msgs, n, vars, &rj, err, errlen);
	if (rc) {
		render_json_free(&rj);
		return rc;
	}
	if (sl_buf_reserve(&c.out, 4096)) {
		render_json_free(&rj);
		return sl_errf(err, errlen, SL_ENOMEM, "%s: out of memory", t->prog.name);
	}
	if (define_globals(&c, msgs, n, vars, &rj))
		tmpl_fail_oom(&c, NULL);
	else
		tmpl_exec(&c, t->prog.root);
	tmpl_arena_free(&c.arena);
	render_json_free(&rj);
	if (c.failed) {
		sl_buf_free(&c.out);
		return SL_EINVAL;
	}
	*out = c.out.p;
	*len = c.out.n;
	return 0;
}
