/*
 * prefix.h — the coordinator's picture of one node group's prefix cache:
 * the chain hashes (common/block_hash.h) of the KV blocks the group says
 * it holds, kept from the cached/evicted events in its Load messages
 * (on_node.c) and read when a request is routed (route.c): how many
 * leading blocks of a prompt the group holds.
 *
 * A multiset (a count per hash): after an eviction the node can cache a
 * block of the same hash again before the coordinator hears of the
 * eviction, and a hash collision can name two blocks. Bounded by the
 * group's KV pool: twice its blocks, as one Load's cached hashes are
 * added before its evicted ones are removed; hashes past the bound
 * are not recorded (routing is then only less informed). Open
 * addressing with linear probing, grown by doubling; no dependency on
 * the rest of the coordinator.
 */
#ifndef COORD_PREFIX_H
#define COORD_PREFIX_H

#include <stdint.h>

typedef struct coord_prefix coord_prefix;

/* At most max_hashes distinct hashes (the group's KV blocks). */
int coord_prefix_create(int max_hashes, coord_prefix **out);
void coord_prefix_destroy(coord_prefix *p);
/* Forget every hash (the group starts over: a snapshot follows). */
void coord_prefix_reset(coord_prefix *p);
/* One more block of hash h; 0, or SL_ENOMEM when it was not recorded. */
int coord_prefix_add(coord_prefix *p, uint64_t h);
/* One block of hash h fewer (absent: nothing). */
void coord_prefix_remove(coord_prefix *p, uint64_t h);
/* How many of hashes[0, n) lead the group's cache: the longest prefix
 * whose every block hash is held. */
int coord_prefix_match(const coord_prefix *p, const uint64_t *hashes, int n);
/* Distinct hashes held. */
int coord_prefix_size(const coord_prefix *p);

#endif
