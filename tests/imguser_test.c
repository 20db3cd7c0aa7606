/*
 * imguser_test.c - an image's User as the ids its jobs run as
 * (images/user.c), against layer folders made in a mkdtemp folder.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "../images/user.h"

static char dir[64];
static char top[128], base[128];
static const char *layers[2];

static void
put(const char *layer, const char *name, const char *text)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/etc", layer);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/etc/%s", layer, name);
	cr_assert_not_null(f = fopen(path, "w"));
	fputs(text, f);
	fclose(f);
}

static void
setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/imguser.XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(top, sizeof(top), "%s/top", dir);
	snprintf(base, sizeof(base), "%s/base", dir);
	cr_assert_eq(mkdir(top, 0755), 0);
	cr_assert_eq(mkdir(base, 0755), 0);
	layers[0] = top;
	layers[1] = base;
	put(base, "passwd", "root:x:0:0:root:/root:/bin/sh\n"
	    "app:x:1001:1002:app:/home/app:/bin/sh\n"
	    "odd:x:12x:1:odd:/:/bin/sh\n");
	put(base, "group", "root:x:0:\nstaff:x:50:app\n");
}

static void
teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

TestSuite(imguser, .init = setup, .fini = teardown);

static struct img_user
ok(const char *user)
{
	struct img_user u = { 99, 99 };
	struct err e = { 0 };

	cr_assert_eq(img_user_resolve(user, layers, 2, &u, &e), 0, "%s: %s", user, e.msg);
	return u;
}

static void
refused(const char *user, int code, const char *msg)
{
	struct img_user u;
	struct err e = { 0 };

	cr_expect_eq(img_user_resolve(user, layers, 2, &u, &e), code, "%s", user);
	cr_expect_str_eq(e.msg, msg);
}

Test(imguser, none_and_root_are_root)
{
	cr_expect_eq(ok(NULL).uid, 0);
	cr_expect_eq(ok("").uid, 0);
	cr_expect_eq(ok("root").uid, 0);
	cr_expect_eq(ok("root").gid, 0);
	cr_expect_eq(ok("root:staff").gid, 50);
}

Test(imguser, numbers_are_taken_as_given)
{
	cr_expect_eq(ok("1000").uid, 1000);
	cr_expect_eq(ok("1000").gid, 0, "as Docker runs a bare number");
	cr_expect_eq(ok("1000:1000").gid, 1000);
	cr_expect_eq(ok("4294967294").uid, 4294967294u);
	refused("4294967295", -ENOENT, "user '4294967295': '4294967295' is not in "
	    "the image's /etc/passwd");
	refused("1000:", -EINVAL, "user '1000:': expected USER or USER:GROUP");
	refused(":1", -EINVAL, "user ':1': expected USER or USER:GROUP");
}

Test(imguser, names_come_from_the_images_own_files)
{
	struct img_user u = ok("app");

	cr_expect_eq(u.uid, 1001);
	cr_expect_eq(u.gid, 1002, "the user's own group");
	cr_expect_eq(ok("app:staff").gid, 50);
	cr_expect_eq(ok("app:7").gid, 7);
	refused("nobody", -ENOENT, "user 'nobody': 'nobody' is not in the image's "
	    "/etc/passwd");
	refused("odd", -ENOENT, "user 'odd': 'odd' is not in the image's /etc/passwd");
	refused("app:wheel", -ENOENT, "user 'app:wheel': 'wheel' is not in the "
	    "image's /etc/group");
	refused("app\x1b[2J", -ENOENT, "user 'app\\x1b[2J': 'app\\x1b[2J' is not in "
	    "the image's /etc/passwd");
}

Test(imguser, the_top_layer_wins_and_a_whiteout_deletes)
{
	char path[256];

	put(top, "passwd", "app:x:2001:2002::/:/bin/sh\n");
	cr_expect_eq(ok("app").uid, 2001);
	snprintf(path, sizeof(path), "%s/etc/passwd", top);
	cr_assert_eq(unlink(path), 0);
	if (mknod(path, S_IFCHR | 0600, makedev(0, 0)) < 0) {
		fprintf(stderr, "imguser: cannot make a whiteout (%s): skipped\n",
		    strerror(errno));
		return;
	}
	refused("app", -ENOENT, "user 'app': the image's /etc/passwd cannot be read: "
	    "it has none");
}

Test(imguser, a_link_is_never_followed)
{
	char path[256];

	snprintf(path, sizeof(path), "%s/etc", top);
	cr_assert_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/etc/passwd", top);
	/* A link to the host's own file would give root's entry: never read. */
	cr_assert_eq(symlink("/etc/passwd", path), 0);
	refused("root:daemon", -ENOENT, "user 'root:daemon': 'daemon' is not in the "
	    "image's /etc/group");
	refused("daemon", -ENOENT, "user 'daemon': the image's /etc/passwd cannot "
	    "be read: it has none");
	/* A whole /etc that is a link: no file below it. */
	cr_assert_eq(unlink(path), 0);
	snprintf(path, sizeof(path), "%s/etc", top);
	cr_assert_eq(rmdir(path), 0);
	cr_assert_eq(symlink("/etc", path), 0);
	refused("daemon", -ENOENT, "user 'daemon': the image's /etc/passwd cannot "
	    "be read: it has none");
}
