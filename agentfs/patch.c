/*
 * patch.c - the image + patch format of patch.h: parse, look up, read.
 *
 * No I/O, no allocation: a patch is a view into bytes its caller holds.
 */
#include <errno.h>
#include <string.h>

#include "patch.h"

static uint32_t
get_u32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}

static uint64_t
get_u64(const unsigned char *p)
{
	return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

static void
put_u32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void
put_u64(unsigned char *p, uint64_t v)
{
	put_u32(p, (uint32_t)v);
	put_u32(p + 4, (uint32_t)(v >> 32));
}

void
patch_empty(struct patch *p, uint64_t size)
{
	p->size = size;
	p->count = 0;
	p->entries = NULL;
}

size_t
patch_bytes(uint32_t count)
{
	return PATCH_HEADER + (size_t)count * PATCH_ENTRY;
}

void
patch_header(unsigned char *out, uint64_t size, uint32_t count)
{
	memcpy(out, PATCH_MAGIC, 8);
	put_u64(out + 8, size);
	put_u32(out + 16, PATCH_BLOCK);
	put_u32(out + 20, count);
}

int
patch_parse(const void *data, size_t len, struct patch *p, struct err *e)
{
	const unsigned char *d = data;
	uint64_t blocks;
	uint32_t count, prev = 0;

	if (len < PATCH_HEADER || memcmp(d, PATCH_MAGIC, 8) != 0)
		return err_set(e, -EBADMSG, "patch: not a patch (magic)");
	p->size = get_u64(d + 8);
	if (p->size == 0 || p->size > PATCH_SIZE_MAX)
		return err_set(e, -EBADMSG, "patch: size %llu out of range",
		    (unsigned long long)p->size);
	if (get_u32(d + 16) != PATCH_BLOCK)
		return err_set(e, -EBADMSG, "patch: block size %u, not %u",
		    get_u32(d + 16), PATCH_BLOCK);
	count = get_u32(d + 20);
	blocks = (p->size + PATCH_BLOCK - 1) / PATCH_BLOCK;
	if (count > blocks || len != patch_bytes(count))
		return err_set(e, -EBADMSG, "patch: %u blocks in %zu bytes over an "
		    "image of %llu", count, len, (unsigned long long)p->size);
	p->count = count;
	p->entries = d + PATCH_HEADER;
	for (uint32_t i = 0; i < count; i++) {
		uint32_t idx = patch_index(p, i);

		if (idx >= blocks || (i > 0 && idx <= prev))
			return err_set(e, -EBADMSG, "patch: block %u: index %u out of "
			    "order or past the image", i, idx);
		prev = idx;
	}
	return 0;
}

uint32_t
patch_index(const struct patch *p, uint32_t i)
{
	return get_u32(p->entries + (size_t)i * PATCH_ENTRY);
}

const unsigned char *
patch_block(const struct patch *p, uint32_t i)
{
	return p->entries + (size_t)i * PATCH_ENTRY + 4;
}

const unsigned char *
patch_find(const struct patch *p, uint32_t idx)
{
	uint32_t lo = 0, hi = p->count;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2, at = patch_index(p, mid);

		if (at == idx)
			return patch_block(p, mid);
		if (at < idx)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

void
patch_read(const unsigned char *img, size_t img_len, const struct patch *p,
    uint64_t off, size_t len, unsigned char *out)
{
	while (len > 0) {
		uint32_t idx = (uint32_t)(off / PATCH_BLOCK);
		size_t in = (size_t)(off % PATCH_BLOCK), n = PATCH_BLOCK - in;
		const unsigned char *b = patch_find(p, idx);

		if (n > len)
			n = len;
		if (b != NULL)
			memcpy(out, b + in, n);
		else if (off >= img_len)
			memset(out, 0, n);
		else if (off + n <= img_len)
			memcpy(out, img + off, n);
		else {
			size_t have = (size_t)(img_len - off);

			memcpy(out, img + off, have);
			memset(out + have, 0, n - have);
		}
		out += n;
		off += n;
		len -= n;
	}
}
