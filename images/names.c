/*
 * names.c - the stored value of a tenant's image name (names.h): encoded
 * by the sandq command, decoded by sandqd, with jansson. A value is data
 * anyone with the tenant's Redis access can write, so the reader checks
 * it as it checks a job's field: bounded, every reference parsed again.
 */
#include <errno.h>
#include <string.h>

#include <jansson.h>

#include "names.h"

/* Parses s into a canonical reference that is not a name, into out. */
static int
canon(const char *field, const char *s, char *out, size_t size, struct err *e)
{
	struct img_ref r;
	struct err pe = { 0 };

	if (img_ref_parse(s, &r, &pe) < 0)
		return err_set(e, -EINVAL, "'%s': %s", field, pe.msg);
	if (r.kind == IMG_NAME)
		return err_set(e, -EINVAL, "'%s': names an image name, not an image", field);
	if (img_ref_str(&r, out, size) < 0)
		return err_set(e, -EINVAL, "'%s': too long", field);
	return 0;
}

int
img_name_value_encode(const struct img_name_value *v, char **out, struct err *e)
{
	char ref[IMG_REF_MAX + 1], given[IMG_REF_MAX + 1];
	json_t *o;
	int rc;

	*out = NULL;
	if ((rc = canon("ref", v->ref, ref, sizeof(ref), e)) < 0 ||
	    (rc = canon("given", v->given[0] ? v->given : v->ref, given,
	    sizeof(given), e)) < 0)
		return rc;
	o = json_pack("{s:s, s:s, s:I}", "ref", ref, "given", given, "at",
	    (json_int_t)v->at_ms);
	if (o == NULL)
		return err_set(e, -ENOMEM, "cannot encode an image name");
	*out = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	return *out != NULL ? 0 : err_set(e, -ENOMEM, "cannot encode an image name");
}

int
img_name_value_decode(const char *json, size_t len, struct img_name_value *v,
    struct err *e)
{
	json_error_t je;
	json_t *o, *ref, *given, *at;
	int rc = 0;

	memset(v, 0, sizeof(*v));
	if (len > IMG_NAME_VALUE_MAX)
		return err_set(e, -EINVAL, "more than %d bytes", IMG_NAME_VALUE_MAX);
	if ((o = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je)) == NULL)
		return err_set(e, -EINVAL, "not JSON: %.100s", je.text);
	ref = json_object_get(o, "ref");
	given = json_object_get(o, "given");
	at = json_object_get(o, "at");
	if (!json_is_object(o) || !json_is_string(ref))
		rc = err_set(e, -EINVAL, "expected an object with a string 'ref'");
	else if ((given != NULL && !json_is_string(given)) ||
	    (at != NULL && !json_is_integer(at)))
		rc = err_set(e, -EINVAL, "'given' must be a string and 'at' an integer");
	else if ((rc = canon("ref", json_string_value(ref), v->ref, sizeof(v->ref),
	    e)) == 0 && given != NULL)
		rc = canon("given", json_string_value(given), v->given, sizeof(v->given), e);
	if (rc == 0 && at != NULL)
		v->at_ms = (int64_t)json_integer_value(at);
	json_decref(o);
	if (rc < 0)
		memset(v, 0, sizeof(*v));
	return rc;
}
