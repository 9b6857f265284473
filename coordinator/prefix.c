/*
 * prefix.c — a bounded multiset of 64-bit block hashes (see prefix.h).
 * Linear probing over a power-of-two table kept at most half full;
 * removal shifts the following run back so lookups need no tombstones.
 * Key 0 marks an empty slot, so a hash of 0 is stored as 1 (the same on
 * every call: only a collision more).
 */
#include "coordinator/prefix.h"

#include <stdlib.h>

#include "common/sl.h"

#define PREFIX_MIN_SLOTS 1024

typedef struct slot {
	uint64_t key;      /* 0: empty */
	int32_t count;
} slot;

struct coord_prefix {
	slot *s;           /* [mask + 1] */
	uint32_t mask;
	int n, max;        /* distinct hashes held, and the bound */
};

static uint64_t key_of(uint64_t h) { return h ? h : 1; }
static uint32_t home(const coord_prefix *p, uint64_t k) { return (uint32_t)(k ^ (k >> 32)) & p->mask; }

int coord_prefix_create(int max_hashes, coord_prefix **out)
{
	coord_prefix *p = calloc(1, sizeof *p);
	if (!p || !(p->s = calloc(PREFIX_MIN_SLOTS, sizeof *p->s))) {
		free(p);
		return SL_ENOMEM;
	}
	p->mask = PREFIX_MIN_SLOTS - 1;
	p->max = max_hashes > 0 ? max_hashes : 1;
	*out = p;
	return SL_OK;
}

void coord_prefix_destroy(coord_prefix *p)
{
	if (!p)
		return;
	free(p->s);
	free(p);
}

void coord_prefix_reset(coord_prefix *p)
{
	for (uint32_t i = 0; i <= p->mask; i++)
		p->s[i] = (slot){0};
	p->n = 0;
}

/* The slot holding key k, or the empty slot where it would go. */
static uint32_t probe(const coord_prefix *p, uint64_t k)
{
	uint32_t i = home(p, k);
	while (p->s[i].key && p->s[i].key != k)
		i = (i + 1) & p->mask;
	return i;
}

static int grow(coord_prefix *p)
{
	uint32_t old = p->mask + 1;
	slot *os = p->s, *ns = calloc((size_t)old * 2, sizeof *ns);
	if (!ns)
		return SL_ENOMEM;
	p->s = ns;
	p->mask = old * 2 - 1;
	for (uint32_t i = 0; i < old; i++)
		if (os[i].key)
			p->s[probe(p, os[i].key)] = os[i];
	free(os);
	return SL_OK;
}

int coord_prefix_add(coord_prefix *p, uint64_t h)
{
	uint64_t k = key_of(h);
	uint32_t i = probe(p, k);
	if (p->s[i].key) {
		p->s[i].count++;
		return SL_OK;
	}
	if (p->n >= p->max)
		return SL_ENOMEM;
	if ((uint64_t)(p->n + 1) * 2 > (uint64_t)p->mask + 1) {
		if (grow(p))
			return SL_ENOMEM;
		i = probe(p, k);
	}
	p->s[i] = (slot){k, 1};
	p->n++;
	return SL_OK;
}

void coord_prefix_remove(coord_prefix *p, uint64_t h)
{
	uint64_t k = key_of(h);
	uint32_t i = probe(p, k);
	if (!p->s[i].key || --p->s[i].count > 0)
		return;
	/* backward shift: move later entries of the run into the hole when
	 * their home does not lie (cyclically) between the hole and them */
	p->s[i] = (slot){0};
	p->n--;
	for (uint32_t j = (i + 1) & p->mask; p->s[j].key; j = (j + 1) & p->mask) {
		uint32_t hj = home(p, p->s[j].key);
		if (((j - hj) & p->mask) >= ((j - i) & p->mask)) {
			p->s[i] = p->s[j];
			p->s[j] = (slot){0};
			i = j;
		}
	}
}

int coord_prefix_match(const coord_prefix *p, const uint64_t *hashes, int n)
{
	int i = 0;
	while (i < n && p->s[probe(p, key_of(hashes[i]))].key)
		i++;
	return i;
}

int coord_prefix_size(const coord_prefix *p) { return p->n; }
