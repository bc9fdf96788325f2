/* A model spec's config tree (megatron-wrap's idea, confignest's inherit
 * and override): a spec file may name a base with "extends", its own
 * fields override the base's, and a command's --set KEY.PATH=VALUE
 * overrides come last. This file turns such a tree into the one JSON
 * document that common/spec.c then validates as it does a plain file, and
 * afterwards says which layer set a field that failed. Internal to
 * common/: the public entry points are aa_spec_load_set and
 * aa_spec_set_check (spec.h). Format: docs/model-spec.md "extends". */
#ifndef AA_SPEC_TREE_H
#define AA_SPEC_TREE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Files an extends chain may hold, the extending file included. */
#define AA_SPEC_EXTENDS_MAX 16

typedef struct aa_spec_tree aa_spec_tree_t;

/* Whether the member `key` of `section` ("" for the top level, else
 * "data") is a file path, which a base file's directory anchors. */
typedef bool (*aa_spec_is_path_fn)(const char *section, const char *key);

/* Reads path and every file its "extends" chain names (each relative to
 * the file that names it, at most AA_SPEC_EXTENDS_MAX files, each at most
 * max_bytes), merges them base first as a JSON merge patch (RFC 7396:
 * objects merged key by key, recursively; a null removes the key; any
 * other value, arrays included, replaces the base's whole), then applies
 * each of the nsets "KEY.PATH=VALUE" overrides the same way, in order.
 * "extends" is removed from every file; the path fields (is_path) of a
 * base file are made absolute against its directory, and those of a --set
 * against the current directory, so that each keeps its meaning in the
 * merged document; the extending file's stay as written. *root receives
 * the merged document (transferred; json_decref it) and *tree what
 * aa_spec_tree_blame needs (transferred; aa_spec_tree_free it), both only
 * on success. Errors (a missing or unreadable file, JSON syntax, a top
 * level that is not an object, "extends" not a string, a cycle, a chain
 * too long, a malformed --set) name the chain, e.g.
 *   "a.json -> b.json -> a.json: extends makes a cycle". */
int aa_spec_tree_load(aa_spec_tree_t **tree, json_t **root, const char *path, size_t max_bytes,
                      const char *const *sets, size_t nsets, aa_spec_is_path_fn is_path);

/* A --set's syntax: "KEY.PATH=VALUE" with every key of the path non-empty.
 * 0, or AA_EINVAL with "--set 'x': <rule>". */
int aa_spec_tree_check_set(const char *set);

/* After the merged document failed validation with a message of the form
 * "<origin>: <path>: <rule>": when a layer other than the extending file
 * set <path> (the last one that holds it), appends "; <path> is set in
 * base.json (which a.json extends)" or "; <path> is set by --set
 * <text>". Leaves any other message alone. */
void aa_spec_tree_blame(const aa_spec_tree_t *tree, const char *origin);

void aa_spec_tree_free(aa_spec_tree_t *tree);

#endif
