/*
 * presets.c - the path presets sandqd publishes (PREFIX:perm_presets,
 * docs/protocol.md "Keys"), read and parsed for C clients, so they list
 * exactly what the servers enforce rather than a copy of the table.
 *
 * The key is written by sandqd but lives in Redis, so its JSON is parsed
 * with jansson and checked field by field, with bounds on the counts.
 * Kept out of libsandq.c so that only a program calling sandq_presets()
 * links jansson (the library is static).
 */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "../common/xmalloc.h"
#include "internal.h"
#include "sandq.h"

#define PRESETS_MAX 64			/* presets in the key */
#define PRESET_RULES_MAX 1024		/* rules of one preset */
#define PRESETS_TEXT_MAX (4u << 20)	/* bytes of the key */

/* A string member of o, copied; NULL when absent or of another type. */
static char *
str_of(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_string(v) ? xstrdup(json_string_value(v)) : NULL;
}

static bool
level_ok(const char *s)
{
	return s != NULL && (strcmp(s, "none") == 0 || strcmp(s, "view") == 0 ||
	    strcmp(s, "read") == 0 || strcmp(s, "write") == 0);
}

/* One preset's object into p; false when it is not the documented shape. */
static bool
preset_parse(json_t *o, struct sandq_preset *p)
{
	json_t *rules = json_object_get(o, "rules"), *r;
	size_t i;

	p->name = str_of(o, "name");
	p->description = str_of(o, "description");
	p->deflt = str_of(o, "default");
	if (p->name == NULL || p->description == NULL || !level_ok(p->deflt) ||
	    !json_is_array(rules) || json_array_size(rules) > PRESET_RULES_MAX)
		return false;
	p->rules = xcalloc(json_array_size(rules) + 1, sizeof(*p->rules));
	json_array_foreach(rules, i, r) {
		struct sandq_preset_rule *pr = &p->rules[p->nrules++];

		pr->pattern = str_of(r, "pattern");
		pr->level = str_of(r, "level");
		if (pr->pattern == NULL || !level_ok(pr->level))
			return false;
	}
	return true;
}

int
sandq_presets(struct sandq *c, struct sandq_presets **out)
{
	const char *argv[2] = { "GET", SANDQ_KEY_PREFIX ":perm_presets" };
	size_t lens[2] = { 3, strlen(argv[1]) };
	struct sandq_presets *ps = NULL;
	redisReply *r = NULL;
	json_t *root = NULL, *a, *o;
	json_error_t je;
	size_t i;
	int rc;

	*out = NULL;
	if ((rc = sandq__read(c, &r, 2, argv, lens)) < 0)
		return rc;
	if (r->type == REDIS_REPLY_NIL) {
		rc = sandq__fail(c, -ENOENT, "%s: not published (no sandqd has "
		    "started on this Redis)", argv[1]);
		goto out_free;
	}
	rc = -EBADMSG;
	if (r->type != REDIS_REPLY_STRING || r->len > PRESETS_TEXT_MAX) {
		sandq__fail(c, rc, "%s: not a string of at most %u bytes",
		    argv[1], PRESETS_TEXT_MAX);
		goto out_free;
	}
	root = json_loadb(r->str, r->len, JSON_REJECT_DUPLICATES, &je);
	a = json_object_get(root, "presets");
	if (root == NULL || !json_is_array(a) || json_array_size(a) > PRESETS_MAX) {
		sandq__fail(c, rc, "%s: not the documented JSON%s%s", argv[1],
		    root == NULL ? ": " : "", root == NULL ? je.text : "");
		goto out_free;
	}
	ps = xcalloc(1, sizeof(*ps));
	ps->default_preset = str_of(root, "default_preset");
	ps->presets = xcalloc(json_array_size(a) + 1, sizeof(*ps->presets));
	json_array_foreach(a, i, o) {
		if (!preset_parse(o, &ps->presets[ps->npresets++])) {
			sandq__fail(c, rc, "%s: preset %zu is not the documented "
			    "shape", argv[1], i);
			goto out_free;
		}
	}
	*out = ps;
	ps = NULL;
	rc = 0;

out_free:
	sandq_presets_free(ps);
	json_decref(root);
	freeReplyObject(r);
	return rc;
}

const struct sandq_preset *
sandq_presets_find(const struct sandq_presets *ps, const char *name)
{
	for (size_t i = 0; ps != NULL && name != NULL && i < ps->npresets; i++)
		if (strcmp(ps->presets[i].name, name) == 0)
			return &ps->presets[i];
	return NULL;
}

void
sandq_presets_free(struct sandq_presets *ps)
{
	if (ps == NULL)
		return;
	for (size_t i = 0; i < ps->npresets; i++) {
		struct sandq_preset *p = &ps->presets[i];

		for (size_t k = 0; k < p->nrules; k++) {
			free(p->rules[k].pattern);
			free(p->rules[k].level);
		}
		free(p->rules);
		free(p->name);
		free(p->description);
		free(p->deflt);
	}
	free(ps->presets);
	free(ps->default_preset);
	free(ps);
}
