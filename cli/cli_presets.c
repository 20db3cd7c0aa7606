/*
 * cli_presets.c - `sandq presets`: the path presets the servers enforce
 * (docs/paths.md "Presets"), as sandqd publishes them at start
 * (sandq:perm_presets, read with libsandq's sandq_presets()), so the list
 * is what the hosts enforce rather than this binary's copy of the table.
 *
 * Without NAME, one line per preset (its default level, how many rules,
 * its description); with NAME, that preset's default and its rules in
 * order. The key lives in Redis, so every string shown is escaped
 * (cli_esc.h). Exit status: 0, 1 for an unknown NAME, 2 usage, 125 when
 * Redis failed or no sandqd has published the presets.
 */
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../libsandq/sandq.h"
#include "cli_common.h"
#include "cli_esc.h"
#include "cli_man.h"
#include "cli_presets.h"

/* One preset as the JSON object of the key's "presets" array. */
static json_t *
preset_json(const struct sandq_preset *p)
{
	json_t *rules = json_array();

	for (size_t i = 0; i < p->nrules; i++)
		json_array_append_new(rules, json_pack("{s:s, s:s}", "pattern",
		    p->rules[i].pattern, "level", p->rules[i].level));
	return json_pack("{s:s, s:s, s:s, s:o}", "name", p->name, "description",
	    p->description, "default", p->deflt, "rules", rules);
}

static void
print_json(json_t *o)
{
	char *text = json_dumps(o, JSON_COMPACT);

	if (text != NULL)
		puts(text);
	free(text);
	json_decref(o);
}

static void
print_list(const struct sandq_presets *ps)
{
	printf("%-16s %-8s %5s  %s\n", "PRESET", "DEFAULT", "RULES",
	    "DESCRIPTION");
	for (size_t i = 0; i < ps->npresets; i++) {
		const struct sandq_preset *p = &ps->presets[i];
		bool dflt = ps->default_preset != NULL &&
		    strcmp(p->name, ps->default_preset) == 0;

		printf("%-16s ", cli_esc_cut(p->name, 16));
		printf("%-8s %5zu  ", cli_esc_cut(p->deflt, 8), p->nrules);
		printf("%s%s\n", cli_esc(p->description), dflt ?
		    " (the default)" : "");
	}
}

static void
print_one(const struct sandq_preset *p)
{
	printf("default %s\n", cli_esc(p->deflt));
	for (size_t i = 0; i < p->nrules; i++) {
		printf("%-5s ", cli_esc(p->rules[i].level));
		printf("%s\n", cli_esc(p->rules[i].pattern));
	}
}

int
cli_presets_main(const struct cli_conn *conn, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct sandq_presets *ps = NULL;
	const struct sandq_preset *p;
	struct sandq *c = NULL;
	bool json = conn->json;
	const char *name = NULL;
	char err[512];
	int ch, status = 125;

	optind = 0;
	while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (ch == 'j') {
			json = true;
		} else if (ch == 'h') {
			cli_man_print("presets");
			return 0;
		} else {
			fputs("Try 'sandq presets --help'.\n", stderr);
			return 2;
		}
	}
	if (conn->help) {
		cli_man_print("presets");
		return 0;
	}
	if (argc - optind > 1) {
		cli_warn("presets takes at most one argument, a preset's name");
		return 2;
	}
	if (optind < argc)
		name = argv[optind];
	if ((c = sandq_connect(conn->redis, cli_tenant_or_default(conn->tenant),
	    err, sizeof(err))) == NULL) {
		cli_warn("%s", err);
		return 125;
	}
	if (sandq_presets(c, &ps) != 0) {
		cli_warn("presets: %s", sandq_last_error(c));
		goto out;
	}
	if (name == NULL) {
		if (json) {
			json_t *a = json_array();

			for (size_t i = 0; i < ps->npresets; i++)
				json_array_append_new(a, preset_json(&ps->presets[i]));
			print_json(json_pack("{s:s?, s:o}", "default_preset",
			    ps->default_preset, "presets", a));
		} else {
			print_list(ps);
		}
		status = 0;
	} else if ((p = sandq_presets_find(ps, name)) == NULL) {
		cli_warn("presets: no preset '%s' (sandq presets lists them)",
		    cli_esc_cut(name, 64));
		status = 1;
	} else {
		if (json)
			print_json(preset_json(p));
		else
			print_one(p);
		status = 0;
	}
out:
	sandq_presets_free(ps);
	sandq_close(c);
	return status;
}
