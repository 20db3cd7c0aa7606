/*
 * cppcheck.h - what `make lint` gives cppcheck ahead of every file: the
 * iteration macros of the system headers it does not read (it runs
 * without them, for speed and to report only sandq's code), as their
 * headers define them. A macro it does not know stops it reading the file.
 */
#include "/usr/include/x86_64-linux-gnu/sys/queue.h"

#define json_array_foreach(array, index, value) \
	for (index = 0; index < json_array_size(array) && \
	    (value = json_array_get(array, index)); index++)
#define json_object_foreach(object, key, value) \
	for (key = json_object_iter_key(json_object_iter(object)); \
	    key && (value = json_object_iter_value(json_object_key_to_iter(key))); \
	    key = json_object_iter_key(json_object_iter_next(object, \
	    json_object_key_to_iter(key))))
