/*
 * perms_json.c - the preset table of perms.c as JSON, for clients.
 *
 * sandqd publishes this text at start as the Redis key PREFIX:perm_presets
 * (docs/protocol.md "Keys"), so a client lists exactly the presets the
 * matcher enforces: it is generated from perms.c's table through its
 * public functions, never kept by hand. Kept apart from perms.c because
 * only sandqd (and the CLI) link jansson for it; the matcher stays free of
 * it.
 *
 * Shape: {"default_preset": NAME, "presets": [{"name", "description",
 * "default" (none|view|read|write), "rules": [{"pattern", "level"}]}]},
 * presets in perms_preset_names() order, rules in their order as written
 * in the table (the matcher normalises patterns the same way whoever
 * writes them).
 */
#include <jansson.h>
#include <stdlib.h>

#include "perms.h"

/* One preset as a JSON object, or NULL if perms.c does not know it. */
static json_t *
preset_json(const char *name)
{
	const struct perm_rule *rules;
	enum perm_level deflt;
	json_t *o, *a;
	size_t n;

	if (perms_preset_rules(name, &rules, &n, &deflt) != 0)
		return NULL;
	a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_pack("{s:s, s:s}", "pattern",
		    rules[i].pattern, "level", perms_level_str(rules[i].level)));
	o = json_pack("{s:s, s:s, s:s}", "name", name, "description",
	    perms_preset_description(name), "default", perms_level_str(deflt));
	json_object_set_new(o, "rules", a);
	return o;
}

char *
perms_presets_json(void)
{
	const char *const *names = perms_preset_names();
	json_t *root, *a = json_array();
	char *text;

	for (size_t i = 0; names[i] != NULL; i++) {
		json_t *p = preset_json(names[i]);

		if (p != NULL)
			json_array_append_new(a, p);
	}
	root = json_pack("{s:s, s:o}", "default_preset", PERMS_PRESET_DEFAULT,
	    "presets", a);
	text = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	return text;
}
