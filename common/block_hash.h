/*
 * block_hash.h — the identity of a full KV block for prefix caching,
 * shared by the node (node/kv.c indexes its cached blocks by it) and the
 * coordinator (coordinator/route.c matches a prompt against the blocks a
 * group reports), so both compute the same value bit for bit.
 *
 * Block i of a token sequence (tokens [i * B, (i + 1) * B), B the group's
 * block size) is named by a chain hash: h_i = sl_block_hash(h_{i-1},
 * those B ids), h_{-1} = SL_BLOCK_HASH_ROOT. Equal hashes therefore mean
 * (up to a collision) an equal whole prefix, not only an equal block.
 *
 * 64 bits is enough because nothing depends on a hash alone: the node
 * keeps each cached block's token ids and its parent's identity and
 * checks both on every hit (a collision costs a miss, never wrong K/V);
 * the coordinator only uses hashes to prefer a group (a collision costs a
 * worse route). FNV-1a over the 32-bit ids, then splitmix64's finaliser
 * so that nearby inputs spread over all 64 bits.
 */
#ifndef SL_BLOCK_HASH_H
#define SL_BLOCK_HASH_H

#include <stdint.h>

#define SL_BLOCK_HASH_ROOT 0x736c7072656669ull /* "slprefi": the empty prefix */

static inline uint64_t sl_block_hash(uint64_t parent, const int32_t *ids, int n)
{
	uint64_t h = 0xcbf29ce484222325ull ^ parent;
	for (int i = 0; i < n; i++) {
		uint32_t v = (uint32_t)ids[i];
		for (int b = 0; b < 4; b++) {
			h ^= (v >> (8 * b)) & 0xff;
			h *= 0x100000001b3ull;
		}
	}
	h ^= (uint64_t)n << 56; /* the block size is part of the name */
	h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
	h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
	return h ^ (h >> 31);
}

/* Chain hashes of the first n_blocks full blocks of ids (block_tokens
 * each) into out[0, n_blocks), continuing from out[from - 1] (from > 0)
 * or the root: lets a caller extend a sequence's hashes as it grows. */
static inline void sl_block_hashes(const int32_t *ids, int block_tokens, int from, int n_blocks,
				   uint64_t *out)
{
	uint64_t h = from > 0 ? out[from - 1] : SL_BLOCK_HASH_ROOT;
	for (int i = from; i < n_blocks; i++)
		out[i] = h = sl_block_hash(h, ids + (long)i * block_tokens, block_tokens);
}

#endif
