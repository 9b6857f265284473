/*
 * sampling_pb.h — common/sampling.h's struct to and from protobuf, in one
 * place for every message that carries it: client.proto's Sampling inside
 * a Submit (coordinator/on_client.c), the same message inside a node
 * Enqueue (coordinator/route.c writes it, node/leader.c reads it).
 *
 * Each table field is found by name, through protobuf-c's descriptors,
 * in the Sampling message or else in the message around it (logprobs and
 * top_logprobs sit in Submit and Enqueue themselves), so a field added to
 * the table and to the .proto needs no code here.
 */
#ifndef SL_SAMPLING_PB_H
#define SL_SAMPLING_PB_H

#include <protobuf-c/protobuf-c.h>

#include "common/sampling.h"
#include "proto/client.pb-c.h"

/* s from sampling (NULL: absent) and outer: fields that are absent keep
 * their defaults; top_logprobs > 0 implies logprobs. */
void sl_sampling_from_pb(sl_sampling *s, const ProtobufCMessage *sampling,
			 const ProtobufCMessage *outer);
/* Every field of s into sampling or outer, present (has_) with its value. */
void sl_sampling_to_pb(const sl_sampling *s, ProtobufCMessage *sampling, ProtobufCMessage *outer);
/* 0 when every table field is in sampling or outer with a type that holds
 * it; else SL_EINVAL naming the field (a .proto and the table disagree). */
int sl_sampling_pb_check(const ProtobufCMessageDescriptor *sampling,
			 const ProtobufCMessageDescriptor *outer, char *err, size_t errlen);

/* The list-valued options of a Sampling message (m NULL: none), borrowed
 * from it; SL_EINVAL with err when logit_bias_ids and logit_bias differ in
 * length. Ranges: sl_token_lists_check. */
int sl_token_lists_from_pb(sl_token_lists *t, const Shardline__Client__Sampling *m, char *err,
			   size_t errlen);
/* t into m (pointers to t's arrays: keep them alive until m is packed). */
void sl_token_lists_to_pb(const sl_token_lists *t, Shardline__Client__Sampling *m);

#endif
