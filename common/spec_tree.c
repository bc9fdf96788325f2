/* A model spec's config tree: the "extends" chain and the --set overrides
 * merged into one JSON document (common/spec_tree.h). */
#include "spec_tree.h"

#include "aa.h"
#include "json.h"
#include "spec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* More overrides than any command line holds; bounds the tree's size. */
#define SETS_MAX 256
/* A --set's text is a short key path and a value. */
#define SET_MAX_BYTES 8192

typedef struct {
  char *name;  /* the file as reached ("specs/base.json"), or the --set's text */
  bool is_set; /* a --set, not a file */
  json_t *doc; /* what the layer says: "extends" removed, path fields anchored */
} layer_t;

/* layer[0] is the extending file, layer[k] the file layer[k - 1] extends,
 * up to layer[n_files - 1]; the --set overrides follow in command-line
 * order. Merged base first: layer[n_files - 1] .. layer[0], then the sets. */
struct aa_spec_tree {
  layer_t *layer;
  size_t n, n_files;
};

void aa_spec_tree_free(aa_spec_tree_t *t) {
  if (!t) return;
  for (size_t i = 0; i < t->n; i++) {
    free(t->layer[i].name);
    json_decref(t->layer[i].doc);
  }
  free(t->layer);
  free(t);
}

/* "a.json -> b.json -> c.json": the first n files of t, cut at cap. */
static void chain(char *dst, size_t cap, const aa_spec_tree_t *t, size_t n) {
  size_t o = 0;
  dst[0] = '\0';
  for (size_t i = 0; i < n && o < cap; i++)
    o += (size_t)snprintf(dst + o, cap - o, "%s%s", i ? " -> " : "", t->layer[i].name);
}

/* The directory part of path ("" for a bare name, "/" for the root). */
static void dir_of(char *dst, size_t cap, const char *path) {
  const char *slash = strrchr(path, '/');
  size_t n = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
  if (n >= cap) n = cap - 1;
  memcpy(dst, path, n);
  dst[n] = '\0';
}

/* dir + "/" + rel into dst (rel alone when dir is empty or rel absolute);
 * AA_EINVAL when it does not fit. */
static int join(char *dst, size_t cap, const char *dir, const char *rel) {
  int n;
  if (!*dir || rel[0] == '/')
    n = snprintf(dst, cap, "%s", rel);
  else
    n = snprintf(dst, cap, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", rel);
  if (n < 0 || (size_t)n >= cap) return aa_error(AA_EINVAL, "%s/%s: path too long", dir, rel);
  return 0;
}

/* The absolute form of relative path rel, anchored at dir (a file's
 * directory, relative to the current one or absolute; "" = the current
 * directory). */
static int anchor(char *dst, size_t cap, const char *dir, const char *rel) {
  if (dir[0] == '/') return join(dst, cap, dir, rel);
  char cwd[AA_PATH_MAX], full[AA_PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) return aa_error(AA_EIO, "current directory: %s", strerror(errno));
  int rc = join(full, sizeof full, cwd, dir); /* "cwd/" for dir "" */
  return rc ? rc : join(dst, cap, full, rel);
}

/* Rewrites the relative path fields of doc (members of the top level and
 * of its object sections that is_path names, when they are non-empty
 * strings) as absolute paths anchored at dir. Anything else is left for
 * the validator to judge. */
static int anchor_paths(json_t *doc, const char *dir, aa_spec_is_path_fn is_path, const char *origin) {
  const char *key;
  json_t *v;
  json_object_foreach(doc, key, v) {
    const char *sub;
    json_t *w;
    if (json_is_object(v)) {
      json_object_foreach(v, sub, w) {
        if (!json_is_string(w) || !json_string_length(w) || json_string_value(w)[0] == '/' ||
            !is_path(key, sub))
          continue;
        char abs[AA_PATH_MAX];
        if (anchor(abs, sizeof abs, dir, json_string_value(w)))
          return aa_error_wrap(AA_EINVAL, "%s: %s.%s", origin, key, sub);
        if (json_string_set(w, abs)) return aa_error(AA_ENOMEM, "%s: out of memory", origin);
      }
    } else if (json_is_string(v) && json_string_length(v) && json_string_value(v)[0] != '/' &&
               is_path("", key)) {
      char abs[AA_PATH_MAX];
      if (anchor(abs, sizeof abs, dir, json_string_value(v)))
        return aa_error_wrap(AA_EINVAL, "%s: %s", origin, key);
      if (json_string_set(v, abs)) return aa_error(AA_ENOMEM, "%s: out of memory", origin);
    }
  }
  return 0;
}

/* RFC 7396 merge patch of patch (an object) into target (an object):
 * objects merge key by key, null removes, anything else replaces. A
 * replacing value is shared, never changed afterwards: only objects are
 * merged into, and those are always the target's own. */
static int merge(json_t *target, json_t *patch) {
  const char *key;
  json_t *v;
  json_object_foreach(patch, key, v) {
    if (json_is_null(v)) {
      json_object_del(target, key);
      continue;
    }
    if (!json_is_object(v)) {
      if (json_object_set(target, key, v)) return aa_error(AA_ENOMEM, "spec: out of memory");
      continue;
    }
    json_t *t = json_object_get(target, key);
    if (!json_is_object(t)) {
      if (!(t = json_object()) || json_object_set_new(target, key, t))
        return aa_error(AA_ENOMEM, "spec: out of memory");
    }
    int rc = merge(t, v);
    if (rc) return rc;
  }
  return 0;
}

int aa_spec_tree_check_set(const char *set) {
  char safe[256];
  aa_json_sanitize(safe, sizeof safe, set);
  const char *eq = strchr(set, '=');
  if (strlen(set) > SET_MAX_BYTES)
    return aa_error(AA_EINVAL, "--set '%s': longer than %d bytes", safe, SET_MAX_BYTES);
  if (!eq) return aa_error(AA_EINVAL, "--set '%s': expected KEY.PATH=VALUE (e.g. model.n_layer=8)", safe);
  if (eq == set) return aa_error(AA_EINVAL, "--set '%s': no key before '=' (e.g. model.n_layer=8)", safe);
  for (const char *p = set; p <= eq; p++) {
    bool starts = p == set || p[-1] == '.';
    if (starts && (*p == '.' || *p == '='))
      return aa_error(AA_EINVAL, "--set '%s': an empty key in the path (a leading, trailing or doubled '.')",
                      safe);
  }
  return 0;
}

/* The document of one --set: {"a": {"b": VALUE}} for "a.b=VALUE", VALUE
 * read as JSON when it is JSON text, else as the string it is. */
static int set_doc(const char *set, json_t **out) {
  int rc = aa_spec_tree_check_set(set);
  if (rc) return rc;
  char safe[256];
  aa_json_sanitize(safe, sizeof safe, set);
  const char *eq = strchr(set, '=');
  json_t *v = json_loads(eq + 1, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
  if (!v && !(v = json_string(eq + 1)))
    return aa_error(AA_EINVAL, "--set '%s': the value is not UTF-8 text", safe);
  /* The keys from the last to the first, each wrapping what follows. */
  const char *end = eq;
  while (end > set) {
    const char *start = end;
    while (start > set && start[-1] != '.')
      start--;
    json_t *o = json_object();
    char *key = strndup(start, (size_t)(end - start));
    int bad = !o || !key || json_object_set_new(o, key, v);
    if (bad && o && key) v = NULL; /* set_new took v even when it failed */
    free(key);
    if (bad) {
      json_decref(v);
      json_decref(o);
      return aa_error(AA_EINVAL, "--set '%s': a key is not UTF-8 text (or out of memory)", safe);
    }
    v = o;
    end = start > set ? start - 1 : set;
  }
  *out = v;
  return 0;
}

/* Appends a layer to t (name copied, doc transferred). */
static int push(aa_spec_tree_t *t, size_t cap, const char *name, bool is_set, json_t *doc) {
  char *copy = strdup(name);
  if (!copy || t->n == cap) {
    free(copy);
    json_decref(doc);
    return aa_error(AA_ENOMEM, "spec: out of memory");
  }
  t->layer[t->n++] = (layer_t){copy, is_set, doc};
  return 0;
}

/* Reads the chain of files from path into t; ids holds each file's
 * device and inode, to find a cycle whatever the spelling of the path. */
static int load_files(aa_spec_tree_t *t, size_t cap, const char *path, size_t max_bytes,
                      aa_spec_is_path_fn is_path) {
  struct {
    dev_t dev;
    ino_t ino;
  } ids[AA_SPEC_EXTENDS_MAX];
  char cur[AA_PATH_MAX], text[2048];
  snprintf(cur, sizeof cur, "%s", path);
  for (;;) {
    size_t k = t->n;
    char *buf = NULL;
    size_t len = 0;
    int rc = aa_read_file(cur, max_bytes, "a spec", &buf, &len);
    if (rc) {
      if (k == 0) return rc;
      chain(text, sizeof text, t, k);
      json_t *prev = json_object_get(t->layer[k - 1].doc, "extends");
      return aa_error_wrap(rc, "%s: extends \"%s\"", text, json_string_value(prev));
    }
    struct stat st;
    if (stat(cur, &st)) {
      free(buf);
      return aa_error(AA_EIO, "%s: %s", cur, strerror(errno));
    }
    for (size_t i = 0; i < k; i++)
      if (ids[i].dev == st.st_dev && ids[i].ino == st.st_ino) {
        free(buf);
        chain(text, sizeof text, t, k);
        return aa_error(AA_EINVAL, "%s -> %s: extends makes a cycle", text, cur);
      }
    ids[k].dev = st.st_dev;
    ids[k].ino = st.st_ino;
    json_t *doc = NULL;
    rc = aa_json_parse_text(buf, len, max_bytes, cur, "a spec", "a JSON object", &doc);
    free(buf);
    if (rc) return rc;
    if (!json_is_object(doc)) {
      rc = aa_error(AA_EINVAL, "%s: top level must be a JSON object (got %s)", cur, aa_json_type_name(doc));
      json_decref(doc);
      return rc;
    }
    if ((rc = push(t, cap, cur, false, doc))) return rc;
    t->n_files++;
    char dir[AA_PATH_MAX];
    dir_of(dir, sizeof dir, cur);
    /* The extending file's paths stay as written: spec.c anchors them at
     * its directory, as for a plain file. */
    if (k > 0 && (rc = anchor_paths(doc, dir, is_path, cur))) return rc;
    json_t *ext = json_object_get(doc, "extends");
    if (!ext) return 0;
    if (!json_is_string(ext))
      return aa_error(
          AA_EINVAL,
          "%s: extends: must be a string, the path of the spec it extends relative to this file (got %s)",
          cur, aa_json_type_name(ext));
    if (!json_string_length(ext)) return aa_error(AA_EINVAL, "%s: extends: must not be empty", cur);
    if (t->n_files == AA_SPEC_EXTENDS_MAX) {
      chain(text, sizeof text, t, t->n);
      return aa_error(AA_EINVAL, "%s: extends chains at most %d files", text, AA_SPEC_EXTENDS_MAX);
    }
    char next[AA_PATH_MAX];
    if (join(next, sizeof next, dir, json_string_value(ext)))
      return aa_error_wrap(AA_EINVAL, "%s: extends", cur);
    memcpy(cur, next, sizeof cur);
  }
}

int aa_spec_tree_load(aa_spec_tree_t **tree, json_t **root, const char *path, size_t max_bytes,
                      const char *const *sets, size_t nsets, aa_spec_is_path_fn is_path) {
  if (nsets > SETS_MAX) return aa_error(AA_EINVAL, "--set: at most %d overrides", SETS_MAX);
  size_t cap = AA_SPEC_EXTENDS_MAX + nsets;
  aa_spec_tree_t *t = calloc(1, sizeof *t);
  json_t *merged = NULL;
  int rc = 0;
  if (!t || !(t->layer = calloc(cap, sizeof *t->layer))) {
    rc = aa_error(AA_ENOMEM, "spec: out of memory");
    goto cleanup;
  }
  if ((rc = load_files(t, cap, path, max_bytes, is_path))) goto cleanup;
  for (size_t i = 0; i < nsets && !rc; i++) {
    json_t *doc = NULL;
    if (!(rc = set_doc(sets[i], &doc)) && !(rc = anchor_paths(doc, "", is_path, sets[i])))
      rc = push(t, cap, sets[i], true, doc);
    else
      json_decref(doc);
  }
  /* The base of the chain is the document as it is (a null in it is the
   * validator's to refuse, as in a plain file); each file above it and
   * each --set patches it. */
  for (size_t i = 0; i < t->n_files; i++)
    json_object_del(t->layer[i].doc, "extends");
  if (!rc) {
    if (!(merged = json_deep_copy(t->layer[t->n_files - 1].doc)))
      rc = aa_error(AA_ENOMEM, "spec: out of memory");
  }
  for (size_t i = t->n_files - 1; i-- > 0 && !rc;)
    rc = merge(merged, t->layer[i].doc);
  for (size_t i = t->n_files; i < t->n && !rc; i++)
    rc = merge(merged, t->layer[i].doc);
cleanup:
  if (rc) {
    aa_spec_tree_free(t);
    json_decref(merged);
    return rc;
  }
  *tree = t;
  *root = merged;
  return 0;
}

/* Whether doc holds the dotted path (keys as the validator prints them). */
static bool holds(const json_t *doc, const char *path) {
  char key[256];
  while (json_is_object(doc)) {
    const char *dot = strchr(path, '.');
    size_t n = dot ? (size_t)(dot - path) : strlen(path);
    if (n >= sizeof key) return false;
    memcpy(key, path, n);
    key[n] = '\0';
    doc = json_object_get(doc, key);
    if (!doc) return false;
    if (!dot) return true;
    path = dot + 1;
  }
  return false;
}

void aa_spec_tree_blame(const aa_spec_tree_t *t, const char *origin) {
  if (!t || t->n < 2) return;
  char msg[2048], path[256];
  snprintf(msg, sizeof msg, "%s", aa_last_error());
  size_t o = strlen(origin);
  if (strncmp(msg, origin, o) || strncmp(msg + o, ": ", 2)) return;
  const char *p = msg + o + 2, *end = strstr(p, ": ");
  if (!end || (size_t)(end - p) >= sizeof path) return;
  memcpy(path, p, (size_t)(end - p));
  path[end - p] = '\0';
  /* The layer whose value the merged document holds: the last --set that
   * names the path, else the most derived file that does. */
  const layer_t *by = NULL;
  for (size_t i = t->n; i-- > t->n_files && !by;)
    if (holds(t->layer[i].doc, path)) by = &t->layer[i];
  for (size_t i = 0; i < t->n_files && !by; i++)
    if (holds(t->layer[i].doc, path)) by = &t->layer[i];
  if (!by || by == &t->layer[0]) return;
  char safe[256];
  aa_json_sanitize(safe, sizeof safe, by->name);
  if (by->is_set) {
    aa_error(AA_EINVAL, "%s; %s is set by --set %s", msg, path, safe);
    return;
  }
  /* The file that extends `by`: the one before it in the chain. */
  aa_error(AA_EINVAL, "%s; %s is set in %s (which %s extends)", msg, path, by->name, by[-1].name);
}
