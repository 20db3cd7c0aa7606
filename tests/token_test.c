/*
 * token_test.c - API tokens (queue/token.c): their shape, their hash, and
 * the record kept for each, read back as untrusted.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../queue/token.h"

Test(token, a_new_token_has_its_shape_and_no_two_are_alike)
{
	char a[TOKEN_LEN + 1], b[TOKEN_LEN + 1];

	cr_assert_eq(token_new(a), 0);
	cr_assert_eq(token_new(b), 0);
	cr_expect_eq(strlen(a), TOKEN_LEN);
	cr_expect(strncmp(a, "sqt_", 4) == 0, "%s", a);
	cr_expect(token_shape_ok(a, strlen(a)), "%s", a);
	cr_expect_str_neq(a, b);
	/* Wrong prefix, length or alphabet: refused before any lookup. */
	cr_expect(!token_shape_ok(a, strlen(a) - 1));
	a[10] = '+';
	cr_expect(!token_shape_ok(a, strlen(a)), "'+' is not base64url");
	a[10] = '\0';
	cr_expect(!token_shape_ok(a, TOKEN_LEN), "a NUL inside");
	memcpy(b, "sqx_", 4);
	cr_expect(!token_shape_ok(b, strlen(b)));
}

Test(token, the_hash_is_sha256_in_lower_case_hex)
{
	char h[TOKEN_HASH_HEX + 1];

	token_hash_hex("abc", 3, h);
	cr_expect_str_eq(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

Test(token, a_record_reads_back_and_what_is_not_one_is_refused)
{
	struct token_record r = { .tenant = "acme", .name = "ci-1", .created_at = 1764115200000 },
	    back;
	struct err e = { 0 };
	char *json = NULL;

	cr_assert_eq(token_record_encode(&r, &json, &e), 0, "%s", e.msg);
	cr_assert_eq(token_record_decode(json, strlen(json), &back, &e), 0, "%s", e.msg);
	cr_expect_str_eq(back.tenant, "acme");
	cr_expect_str_eq(back.name, "ci-1");
	cr_expect(!back.admin);
	cr_expect_eq(back.created_at, 1764115200000);
	free(json);
	r.admin = true;
	cr_expect_eq(token_record_encode(&r, &json, &e), -EINVAL, "an admin names no tenant");
	r.tenant[0] = '\0';
	cr_assert_eq(token_record_encode(&r, &json, &e), 0, "%s", e.msg);
	cr_assert_eq(token_record_decode(json, strlen(json), &back, &e), 0, "%s", e.msg);
	cr_expect(back.admin);
	free(json);
#define REFUSED(t_) do { \
		cr_expect_eq(token_record_decode(t_, strlen(t_), &back, &e), -EINVAL, "%s", t_); \
		cr_expect_str_eq(back.tenant, "", "nothing half-read"); \
	} while (0)
	REFUSED("[]");
	REFUSED("{\"tenant\":\"a\",\"name\":\"n\",\"admin\":false}");
	REFUSED("{\"tenant\":\"a b\",\"name\":\"n\",\"admin\":false,\"created_at\":1}");
	REFUSED("{\"tenant\":\"a\",\"name\":\"n\\u001b\",\"admin\":false,\"created_at\":1}");
	REFUSED("{\"tenant\":\"a\",\"name\":\"n\",\"admin\":true,\"created_at\":1}");
	REFUSED("{\"tenant\":\"a\",\"tenant\":\"b\",\"name\":\"n\",\"admin\":false,\"created_at\":1}");
#undef REFUSED
	cr_expect(token_name_ok("ci.deploy_1-x"));
	cr_expect(!token_name_ok(""));
	cr_expect(!token_name_ok("a/b"));
}
