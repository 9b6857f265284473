/*
 * openai_int.h — what the three files of the OpenAI front door share:
 * openai_request.c reads a request's JSON into the core's coord_request
 * (oai_req) and its prompts; openai.c runs the exchange (one core request
 * per choice, their events through the sink); openai_response.c writes
 * OpenAI JSON and server-sent events. JSON is read and written only in
 * these files and http*.c.
 */
#ifndef COORD_OPENAI_INT_H
#define COORD_OPENAI_INT_H

#include <cjson/cJSON.h>

#include "coordinator/coord_int.h"
#include "coordinator/openai.h"
#include "common/sl.h"
#include "text/tool_calls.h"
#include "text/tool_constraint.h"

/* A 400-class problem found while reading the request. */
typedef struct oai_err {
	int status;
	const char *type, *param, *code;
	char msg[SL_ERRLEN];
} oai_err;

/* A chat request's tools (openai_tools.c); on when json is set and the
 * choice is not none. */
typedef struct oai_tools {
	char *json;                /* the request's tools array as JSON (malloc'd); NULL: none */
	text_tool_choice choice;
	const char *name;          /* NAMED: the function (into the request's JSON) */
	int parallel;              /* parallel_tool_calls */
	text_tool_family family;   /* the model template's */
	int knows;                 /* the template renders tools itself */
	char *constraint;          /* required / named: the structural tag (malloc'd) */
} oai_tools;

/* The request's fields every endpoint shares, as one core request to copy
 * per choice. Its strings point into the parsed JSON. */
typedef struct oai_req {
	coord_request s;
	coord_str stops[COORD_MAX_STOPS];
	int n, stream, include_usage, return_token_ids;
	int logprobs;              /* -1: none; else the alternatives per token */
	int has_seed;
	uint64_t seed;
	int model;
	oai_tools tools;           /* chat; free with coord_oai_free_tools */
	int echo;                  /* completions: the prompt's text before each choice's */
	int32_t bias_ids[SL_SAMPLING_MAX_LOGIT_BIAS]; /* s.lists' storage */
	float bias[SL_SAMPLING_MAX_LOGIT_BIAS];
	int32_t stop_ids[SL_SAMPLING_MAX_STOP_TOKEN_IDS];
	char *constraint;          /* s.constraint's text when it was printed here (malloc'd) */
	const char *constraint_param; /* the field s.constraint came from (a static string) */
} oai_req;

/* What coord_oai_read_common allocated (on every path, read or refused). */
void coord_oai_req_free(oai_req *q);

/* One prompt: text, or token ids (owned). */
typedef struct oai_prompt {
	const char *text;
	int32_t *ids;
	size_t n_ids;
} oai_prompt;

/* One choice of an exchange: a core request and what it returned. */
typedef struct oai_choice {
	coord_req *req;            /* running; NULL once it ended or left */
	int prompt;                /* index of its prompt */
	int done;
	Shardline__Client__FinishReason finish;
	int timed_out;
	char *error;               /* ERROR's message (malloc'd) */
	int prompt_tokens, completion_tokens;
	sl_buf text;          /* stream = false: the whole text */
	coord_ids ids;             /* stream = false: every token id */
	float *lp, *top_lp;        /* stream = false: Done's log-probs ([n_lp], [n_lp * top_n]) */
	int32_t *top_ids;
	size_t n_lp;
	int top_n;
	size_t text_off;           /* completions' text_offset of the next token */
	text_tool_stream *tp;      /* stream with tools: the call parser */
	int lp_sent;               /* stream with tools: this chunk's ids/log-probs went out */
	sl_buf echo;               /* stream with echo: the prompt's text, sent as the
				    * choice's first event (then emptied) */
} oai_choice;

/* One HTTP request to a completions endpoint. */
typedef struct oai_call {
	coord *c;
	coord_http_call *x;
	int chat, stream, include_usage, return_token_ids;
	int logprobs;              /* -1: none; else alternatives per token */
	const text_tok *tok;
	int32_t anchor;            /* a plain token decoded before another (token_text); -1: none */
	int submitting;            /* Dones are only recorded, nothing is sent */
	int answered;              /* a response (or the stream's end) went out */
	int streaming;             /* the 200 and the first event went out */
	int n_choices, n_done;
	oai_choice *ch;
	char id[48];
	long long created;
	char model[COORD_MAX_NAME + 1];
	sl_buf head;                   /* {"id":...,"object":...,"created":...,"model":... of every event */
	sl_buf ev;                     /* scratch for one event */
	const char *constraint_param;  /* oai_req's: what a refused constraint's 400 names */
	int tools_on;                  /* chat with tools: output parsed into tool_calls */
	text_tool_family family;
	char **tool_names;             /* [n_tool_names]: only their calls count (malloc'd) */
	int n_tool_names;
	uint64_t rng;                  /* tool call ids */
} oai_call;

/* openai_request.c: each 0, or -1 with *e the answer. */
/* e gets status, param and the message; returns -1. */
int coord_oai_fail(oai_err *e, int status, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Every field but the prompt / messages. */
int coord_oai_read_common(coord *c, const cJSON *root, int chat, oai_req *q, oai_err *e);
/* /v1/completions' prompt: one or more, text or ids (*out: free with
 * coord_oai_free_prompts, also after a failure). */
int coord_oai_read_prompts(const cJSON *root, oai_prompt **out, int *n_out, oai_err *e);
void coord_oai_free_prompts(oai_prompt *ps, int n);
/* /v1/chat/completions' messages rendered by model's template and encoded
 * into p->ids (malloc'd, also after a failure). */
int coord_oai_chat_prompt(coord *c, int model, const cJSON *root, const oai_tools *tools, oai_prompt *p,
			  oai_err *e);

/* openai_tools.c */
/* tools, tool_choice, parallel_tool_calls into q->tools, and the constraint
 * required / named need into q->s. */
int coord_oai_read_tools(coord *c, const cJSON *root, oai_req *q, oai_err *e);
void coord_oai_free_tools(oai_tools *t);
/* Message m's tool fields (tool_calls, tool_call_id, name) as the JSON
 * object the template gets beside role and content, arguments strings
 * parsed into objects (*out malloc'd; NULL: none). param: "messages[i]". */
int coord_oai_message_extra(const cJSON *m, const char *param, char **out, oai_err *e);
/* For templates that know no tools: the calls as Hermes text, and the
 * system prompt that describes the tools. */
int coord_oai_calls_as_text(const cJSON *tool_calls, sl_buf *out);
int coord_oai_tools_prompt(const oai_tools *t, sl_buf *out);
/* The tools' function names into o->tool_names; -1: out of memory. */
int coord_oai_keep_tool_names(oai_call *o, const oai_tools *t);
/* A new call id: call_<24 alphanumerics>; Mistral: 9 alphanumerics. */
void coord_oai_tool_call_id(oai_call *o, char *out, size_t n);
/* "tool_calls":[...] of a whole answer. */
void coord_oai_tool_calls_json(sl_buf *j, oai_call *o, const text_tool_parsed *p);

/* openai_response.c */
void coord_oai_send_err(coord_http_call *x, const oai_err *e);
const char *coord_oai_finish_name(Shardline__Client__FinishReason f);
/* The HTTP status and type of a choice that ended with ERROR or REFUSED
 * (400 naming o's constraint field). */
void coord_oai_error_status(const oai_call *o, const oai_choice *ch, oai_err *e);
/* o->head: the id, object, created and model fields of every answer; -1: no memory. */
int coord_oai_write_head(oai_call *o, int chat);
/* stream = false: the whole answer, once every choice is done. */
void coord_oai_respond_whole(oai_call *o);
/* The 200 of a stream and, for chat, each choice's role: before its first
 * event. -1: it could not start (the exchange was answered with a 500). */
int coord_oai_stream_start(oai_call *o);
/* A chunk k of choice i, or its end (k NULL, finish set). */
void coord_oai_choice_event(oai_call *o, int i, const coord_event *k, const char *finish);
void coord_oai_stream_error(oai_call *o, const oai_err *e);
/* The usage event when asked for, then [DONE]. */
void coord_oai_stream_end(oai_call *o);
/* GET /v1/models, /v1/models/{id} (id NULL: the list). */
void coord_oai_list_models(coord *c, coord_http_call *x, const char *id);

/* openai_response.c: every running choice leaves the exchange (the tick
 * cancels it). */
void coord_oai_detach_all(oai_call *o);

#endif
