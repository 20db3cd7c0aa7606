/*
 * dashboard.c - the web dashboard's static files at /dashboard/ (docs/
 * operations.md, "Dashboard"), served by libh2o's file handler.
 *
 * DESIGN. The pages are plain HTML, CSS and ES modules in a folder
 * (gateway/dashboard/ in the tree, PREFIX/share/sandq/dashboard installed),
 * served as files rather than embedded in the binary: no build step turns
 * them into C, an operator can read (or replace) what the browser runs,
 * and a change to a page needs no rebuild. The folder is --dashboard DIR or
 * [gateway] dashboard; empty means the first of ../share/sandq/dashboard
 * and ../gateway/dashboard beside the running binary (an installed tree,
 * then the build folder of a checkout), so neither a compiled-in path nor
 * the working directory decides. None found: /dashboard/ is the API's 404
 * and the log says why; the API is unaffected.
 *
 * The pages hold no secret and decide nothing: they call the same /v1
 * routes with the token the user pasted, and the gateway's checks (admin
 * or the token's tenant) are what keep tenants apart. Every response from
 * /dashboard/ carries a Content-Security-Policy allowing scripts, styles
 * and fetches from this origin only, so should a tenant's text ever reach
 * the DOM as markup, no inline script or outside load runs.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/log.h"
#include "internal.h"

/* The headers every dashboard response carries (h2o keeps the pointers). */
static h2o_iovec_t csp_name = { H2O_STRLIT("content-security-policy") };
static h2o_iovec_t nosniff_name = { H2O_STRLIT("x-content-type-options") };
static h2o_iovec_t frame_name = { H2O_STRLIT("x-frame-options") };
static h2o_iovec_t referrer_name = { H2O_STRLIT("referrer-policy") };
static h2o_headers_command_t dashboard_headers[] = {
	{ H2O_HEADERS_CMD_SET, &csp_name, { H2O_STRLIT("default-src 'none'; "
	    "script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
	    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'") } },
	{ H2O_HEADERS_CMD_SET, &nosniff_name, { H2O_STRLIT("nosniff") } },
	{ H2O_HEADERS_CMD_SET, &frame_name, { H2O_STRLIT("DENY") } },
	{ H2O_HEADERS_CMD_SET, &referrer_name, { H2O_STRLIT("no-referrer") } },
	{ H2O_HEADERS_CMD_NULL, NULL, { NULL, 0 } },
};

/* Whether path is a folder holding index.html. */
static bool
dashboard_dir_ok(const char *path)
{
	char index[PATH_MAX];
	struct stat st;

	if (snprintf(index, sizeof(index), "%s/index.html", path) >= (int)sizeof(index))
		return false;
	return stat(index, &st) == 0 && S_ISREG(st.st_mode);
}

/*
 * The default folder into out: ../share/sandq/dashboard, then
 * ../gateway/dashboard, beside /proc/self/exe. Returns false when neither
 * holds an index.html.
 */
static bool
dashboard_default(char *out, size_t outlen)
{
	static const char *const rel[] = { "../share/sandq/dashboard",
	    "../gateway/dashboard" };
	char exe[PATH_MAX];
	ssize_t n;
	char *slash;

	if ((n = readlink("/proc/self/exe", exe, sizeof(exe) - 1)) <= 0)
		return false;
	exe[n] = '\0';
	if ((slash = strrchr(exe, '/')) == NULL)
		return false;
	*slash = '\0';
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		if (snprintf(out, outlen, "%s/%s", exe, rel[i]) < (int)outlen &&
		    dashboard_dir_ok(out))
			return true;
	}
	return false;
}

/*
 * Registers /dashboard on host as the files of dir (NULL or "" for the
 * default), index.html for a folder, with the headers above. A folder
 * without index.html is refused (-ENOENT, naming it) when given; a
 * missing default is only logged.
 */
int
dashboard_register(h2o_hostconf_t *host, const char *dir, struct err *e)
{
	static const char *index_files[] = { "index.html", NULL };
	static char found[PATH_MAX];
	h2o_pathconf_t *path;

	if (dir == NULL || dir[0] == '\0') {
		if (!dashboard_default(found, sizeof(found))) {
			log_info("no dashboard folder beside the binary "
			    "(../share/sandq/dashboard): /dashboard/ is off; "
			    "--dashboard DIR names one");
			return 0;
		}
		dir = found;
	} else if (!dashboard_dir_ok(dir)) {
		return err_set(e, -ENOENT, "--dashboard '%.200s': no index.html there",
		    dir);
	}
	path = h2o_config_register_path(host, "/dashboard", 0);
	h2o_file_register(path, dir, index_files, NULL, 0);
	h2o_headers_register(path, dashboard_headers);
	log_info("dashboard: /dashboard/ serves %s", dir);
	return 0;
}
