/* The axis table (axis.h) and the arithmetic of axis orders. */
#include "axis.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static const aa_axis_info_t axes[AA_AXES] = {
#define AA_AXIS_ROW_(id, name_, key_, letter_, atorch_, megatron_, merak_, method_, pos_, search_, host_,    \
                     always_)                                                                                \
  [AA_AXIS_##id] = {.name = name_,                                                                           \
                    .key = key_,                                                                             \
                    .letter = letter_,                                                                       \
                    .atorch = atorch_,                                                                       \
                    .megatron = megatron_,                                                                   \
                    .merak = merak_,                                                                         \
                    .method = method_,                                                                       \
                    .default_pos = pos_,                                                                     \
                    .search = search_,                                                                       \
                    .host = host_,                                                                           \
                    .always = always_},
    AA_AXIS_LIST(AA_AXIS_ROW_)
#undef AA_AXIS_ROW_
};

const aa_axis_info_t *aa_axis_info(aa_axis_t a) { return (unsigned)a < AA_AXES ? &axes[a] : NULL; }

const char *aa_axis_name(aa_axis_t a) { return (unsigned)a < AA_AXES ? axes[a].name : "?"; }

int aa_axis_from_name(const char *name) {
  for (int a = 0; name && a < AA_AXES; a++)
    if (strcmp(name, axes[a].name) == 0) return a;
  return -1;
}

int aa_axis_from_letter(char c) {
  for (int a = 0; a < AA_AXES; a++)
    if (axes[a].letter == c) return a;
  return -1;
}

unsigned aa_axis_host_mask(void) {
  unsigned m = 0;
  for (int a = 0; a < AA_AXES; a++)
    if (axes[a].host == AA_HOST_KEEP) m |= 1u << a;
  return m;
}

unsigned aa_axis_host_mask_preferred(void) {
  unsigned m = 0;
  for (int a = 0; a < AA_AXES; a++)
    if (axes[a].host != AA_HOST_ANY) m |= 1u << a;
  return m;
}

const char *aa_axis_host_words(char *out, size_t cap) {
  size_t o = 0;
  out[0] = '\0';
  for (int a = 0; a < AA_AXES && o < cap; a++)
    if (axes[a].host == AA_HOST_KEEP)
      o += (size_t)snprintf(out + o, cap - o, "%s%s", o ? " x " : "", axes[a].name);
  if (o < cap) snprintf(out + o, cap - o, "-parallel");
  return out;
}

void aa_axis_default_order(aa_axis_t out[AA_AXES]) {
  for (int a = 0; a < AA_AXES; a++)
    out[axes[a].default_pos] = (aa_axis_t)a;
}

bool aa_axis_order_valid(const aa_axis_t order[AA_AXES]) {
  unsigned seen = 0;
  for (int i = 0; i < AA_AXES; i++) {
    if ((unsigned)order[i] >= AA_AXES || (seen & 1u << order[i])) return false;
    seen |= 1u << order[i];
  }
  return true;
}

void aa_axis_order_from(aa_axis_t out[AA_AXES], const aa_axis_t *listed, int n) {
  aa_axis_t dflt[AA_AXES];
  aa_axis_default_order(dflt);
  unsigned seen = 0;
  int k = 0;
  for (int i = 0; i < n && k < AA_AXES; i++)
    if ((unsigned)listed[i] < AA_AXES && !(seen & 1u << listed[i])) {
      seen |= 1u << listed[i];
      out[k++] = listed[i];
    }
  for (int i = 0; i < AA_AXES && k < AA_AXES; i++)
    if (!(seen & 1u << dflt[i])) out[k++] = dflt[i];
}

const char *aa_axis_order_name(const aa_axis_t order[AA_AXES], char out[AA_AXES + 1]) {
  if (!aa_axis_order_valid(order)) {
    memcpy(out, "?", 2);
    return out;
  }
  for (int i = 0; i < AA_AXES; i++)
    out[i] = axes[order[i]].letter;
  out[AA_AXES] = '\0';
  return out;
}

bool aa_axis_order_parse(aa_axis_t out[AA_AXES], const char *letters) {
  aa_axis_t listed[AA_AXES];
  size_t n = letters ? strlen(letters) : 0;
  unsigned seen = 0;
  if (n == 0 || n > AA_AXES) return false;
  for (size_t i = 0; i < n; i++) {
    int a = aa_axis_from_letter(letters[i]);
    if (a < 0 || (seen & 1u << a)) return false;
    seen |= 1u << a;
    listed[i] = (aa_axis_t)a;
  }
  for (int a = 0; a < AA_AXES; a++)
    if (axes[a].always && !(seen & 1u << a)) return false;
  aa_axis_order_from(out, listed, (int)n);
  return true;
}

bool aa_axis_order_is(const aa_axis_t order[AA_AXES], const char *letters) {
  aa_axis_t want[AA_AXES];
  if (!aa_axis_order_parse(want, letters)) return false;
  size_t k = 0, n = strlen(letters);
  for (int i = 0; i < AA_AXES && k < n; i++)
    if (strchr(letters, axes[order[i]].letter)) {
      if (axes[order[i]].letter != letters[k]) return false;
      k++;
    }
  return k == n;
}

bool aa_axis_order_nth(aa_axis_t out[AA_AXES], int k) {
  /* k in the factorial number system: digit i picks among the axes left. */
  aa_axis_t left[AA_AXES];
  int fact = 1;
  for (int a = 0; a < AA_AXES; a++) {
    left[a] = (aa_axis_t)a;
    fact *= a + 1;
  }
  if (k < 0 || k >= fact) return false;
  for (int i = 0, n = AA_AXES; i < AA_AXES; i++, n--) {
    fact /= n;
    int d = k / fact;
    k %= fact;
    out[i] = left[d];
    memmove(left + d, left + d + 1, (size_t)(n - d - 1) * sizeof left[0]);
  }
  return true;
}
