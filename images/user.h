/*
 * user.h - the user an image's config names (its "User"), as the ids its
 * jobs run as inside their sandbox.
 *
 * A sandbox maps one id inside to its worker's host uid (sandbox/ns.c),
 * so an image's user is one uid and one gid, found once per image by the
 * worker that prepares sandboxes for it:
 *
 *   ""  (none)       root: 0:0, as Docker runs an image without a User
 *   root             0:0
 *   UID  or UID:GID  numbers, as given (GID 0 if absent, as Docker does)
 *   NAME or NAME:GROUP, UID:GROUP, NAME:GID
 *                    names looked up in the image's own /etc/passwd and
 *                    /etc/group, read from its unpacked layers
 *
 * The layers are the cache's folders (top first); the files are a
 * tenant's and are read as hostile: never through a symbolic link
 * (each component opened with O_NOFOLLOW), at most IMG_USER_FILE_MAX
 * bytes, a whiteout (a character device) ending the search. An opaque
 * /etc in an upper layer (user.overlay.opaque) is not looked for: a
 * lower layer's file would then be read where the sandbox shows none
 * (docs/images.md says so).
 *
 * Lifecycle: one call; nothing to free.
 */
#ifndef SANDQ_IMAGES_USER_H
#define SANDQ_IMAGES_USER_H

#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"

#define IMG_USER_MAX 256			/* bytes of a User field */
#define IMG_USER_FILE_MAX (1u << 20)		/* bytes of /etc/passwd, /etc/group read */
#define IMG_USER_ID_MAX UINT32_C(4294967294)	/* (uid_t)-1 is not an id */

struct img_user {
	uint32_t uid;		/* the job's uid inside the sandbox */
	uint32_t gid;		/* and its gid */
};

/*
 * Resolves user (an image config's User; NULL or "" is root) into *out,
 * reading names from etc/passwd and etc/group of layers (n folders, top
 * first) as above. Returns 0, or -EINVAL / -ENOENT with e naming the user
 * (escaped) and what is wrong ("user 'app': not in the image's
 * /etc/passwd").
 */
int img_user_resolve(const char *user, const char *const *layers, size_t n,
    struct img_user *out, struct err *e);

#endif
