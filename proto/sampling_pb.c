/*
 * sampling_pb.c — the sampling table over protobuf-c's reflection (see
 * sampling_pb.h). A table field and its protobuf field must agree in
 * kind: float with float, int32 with int32 or bool, uint64 with uint64;
 * sl_sampling_pb_check says where they do not (tests/unit/test_text_util.c
 * runs it on both messages), and a field that does not fit is skipped.
 */
#include "proto/sampling_pb.h"

#include <string.h>

#include "common/sl.h"

/* The protobuf field of f in sampling or outer, and the message it is in;
 * NULL when neither has it or its type cannot hold f. */
static const ProtobufCFieldDescriptor *find(const sl_sampling_field *f,
					    const ProtobufCMessageDescriptor *sampling,
					    const ProtobufCMessageDescriptor *outer, int *in_outer)
{
	const ProtobufCFieldDescriptor *d =
		sampling ? protobuf_c_message_descriptor_get_field_by_name(sampling, f->name) : NULL;
	*in_outer = 0;
	if (!d && outer) {
		d = protobuf_c_message_descriptor_get_field_by_name(outer, f->name);
		*in_outer = 1;
	}
	if (!d || d->label != PROTOBUF_C_LABEL_OPTIONAL)
		return NULL;
	switch (f->type) {
	case SL_SF_FLOAT: return d->type == PROTOBUF_C_TYPE_FLOAT ? d : NULL;
	case SL_SF_INT32:
		return d->type == PROTOBUF_C_TYPE_INT32 || d->type == PROTOBUF_C_TYPE_BOOL ? d : NULL;
	default: return d->type == PROTOBUF_C_TYPE_UINT64 ? d : NULL;
	}
}

void sl_sampling_from_pb(sl_sampling *s, const ProtobufCMessage *sampling,
			 const ProtobufCMessage *outer)
{
	sl_sampling_default(s);
	for (int i = 0; i < sl_sampling_n_fields; i++) {
		const sl_sampling_field *f = &sl_sampling_fields[i];
		int in_outer;
		const ProtobufCFieldDescriptor *d =
			find(f, sampling ? sampling->descriptor : NULL, outer->descriptor, &in_outer);
		const char *m = (const char *)(in_outer ? outer : sampling);
		if (!d || !m || !*(const protobuf_c_boolean *)(m + d->quantifier_offset))
			continue;
		char *to = (char *)s + f->offset;
		const char *from = m + d->offset;
		if (d->type == PROTOBUF_C_TYPE_BOOL)
			*(int32_t *)to = *(const protobuf_c_boolean *)from != 0;
		else /* float, int32, uint64: the same C type on both sides */
			memcpy(to, from, f->type == SL_SF_UINT64 ? 8 : 4);
	}
	if (s->top_logprobs > 0)
		s->logprobs = 1;
}

void sl_sampling_to_pb(const sl_sampling *s, ProtobufCMessage *sampling, ProtobufCMessage *outer)
{
	for (int i = 0; i < sl_sampling_n_fields; i++) {
		const sl_sampling_field *f = &sl_sampling_fields[i];
		int in_outer;
		const ProtobufCFieldDescriptor *d =
			find(f, sampling ? sampling->descriptor : NULL, outer->descriptor, &in_outer);
		char *m = (char *)(in_outer ? outer : sampling);
		if (!d || !m)
			continue;
		*(protobuf_c_boolean *)(m + d->quantifier_offset) = 1;
		const char *from = (const char *)s + f->offset;
		char *to = m + d->offset;
		if (d->type == PROTOBUF_C_TYPE_BOOL)
			*(protobuf_c_boolean *)to = *(const int32_t *)from != 0;
		else
			memcpy(to, from, f->type == SL_SF_UINT64 ? 8 : 4);
	}
}

int sl_sampling_pb_check(const ProtobufCMessageDescriptor *sampling,
			 const ProtobufCMessageDescriptor *outer, char *err, size_t errlen)
{
	for (int i = 0; i < sl_sampling_n_fields; i++) {
		int in_outer;
		if (!find(&sl_sampling_fields[i], sampling, outer, &in_outer))
			return sl_errf(err, errlen, SL_EINVAL,
				       "sampling field %s: no optional field of that name and kind in %s or %s",
				       sl_sampling_fields[i].name, sampling->name, outer->name);
	}
	return 0;
}

int sl_token_lists_from_pb(sl_token_lists *t, const Shardline__Client__Sampling *m, char *err,
			   size_t errlen)
{
	*t = (sl_token_lists){0};
	if (!m)
		return 0;
	if (m->n_logit_bias_ids != m->n_logit_bias)
		return sl_errf(err, errlen, SL_EINVAL,
			       "logit_bias: %zu token ids but %zu values", m->n_logit_bias_ids,
			       m->n_logit_bias);
	/* counts past any limit stay past it as ints: the range check refuses them */
	size_t cap = (size_t)1 << 30;
	t->bias_ids = m->logit_bias_ids;
	t->bias = m->logit_bias;
	t->n_bias = (int)(m->n_logit_bias < cap ? m->n_logit_bias : cap);
	t->stop_ids = m->stop_token_ids;
	t->n_stop_ids = (int)(m->n_stop_token_ids < cap ? m->n_stop_token_ids : cap);
	return 0;
}

void sl_token_lists_to_pb(const sl_token_lists *t, Shardline__Client__Sampling *m)
{
	m->n_logit_bias_ids = m->n_logit_bias = (size_t)t->n_bias;
	m->logit_bias_ids = (int32_t *)t->bias_ids;
	m->logit_bias = (float *)t->bias;
	m->n_stop_token_ids = (size_t)t->n_stop_ids;
	m->stop_token_ids = (int32_t *)t->stop_ids;
}
