/* The relay: the key-value store through which the ranks of a gang meet
 * (comm/comm.h aa_comm_store_t), kept by the planner because it is the one
 * place every rank's executor already talks to, whatever host it is on.
 *
 * A table lives exactly as long as its run's gang: job_run.c opens it when
 * it dispatches a run of more than one rank (it knows the gang's
 * executors) and closes it when the run's gang is freed. Only the
 * executors of that gang may set or get its keys. A get for a key not yet
 * set waits in the table and is answered by the set; it ends unanswered
 * with the run. Everything a peer can make the planner hold is bounded:
 * keys and bytes per run (a refusal), pending gets per rank (past it the
 * executor is closed as for a protocol error). docs/service.md "Relay". */
#include "planner_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct relay_key {
  char *key;
  void *value;
  size_t n;
  struct relay_key *next;
} relay_key_t;

/* A kv_get waiting for its key: answered to the executor by id (the
 * connection may be gone by then). */
typedef struct relay_wait {
  uint64_t executor, req;
  int rank;
  char *key;
  struct relay_wait *next;
} relay_wait_t;

struct aa_relay {
  aa_planner_t *p;
  int64_t job, run;
  int world;
  uint64_t *members; /* executor id of each rank */
  int *pending;      /* waiting gets of each rank */
  relay_key_t *keys;
  int nkeys, max_keys;
  size_t bytes, max_bytes;
  relay_wait_t *waits;
  aa_relay_t *next; /* on p->relays */
};

int aa__relay_open(aa_planner_t *p, int64_t job, int64_t run, int world, const uint64_t *executors,
                   aa_relay_t **out) {
  aa_relay_t *r = calloc(1, sizeof *r);
  if (r) r->members = calloc((size_t)world, sizeof *r->members);
  if (r && r->members) r->pending = calloc((size_t)world, sizeof *r->pending);
  if (!r || !r->members || !r->pending) {
    if (r) free(r->members);
    free(r);
    return aa_error(AA_ENOMEM, "planner: no memory for the store of run %lld", (long long)run);
  }
  r->p = p;
  r->job = job;
  r->run = run;
  r->world = world;
  memcpy(r->members, executors, (size_t)world * sizeof *executors);
  r->max_keys = AA_RELAY_KEYS_PER_RANK * world + AA_RELAY_KEYS_EXTRA;
  size_t bytes = AA_RELAY_BYTES_BASE + (size_t)world * AA_RELAY_BYTES_PER_RANK;
  r->max_bytes = bytes < AA_RELAY_BYTES_MAX ? bytes : AA_RELAY_BYTES_MAX;
  r->next = p->relays;
  p->relays = r;
  *out = r;
  return 0;
}

void aa__relay_open_gang(aa_planner_t *p, aa_planner_job_t *j) {
  if (j->world < 2) return;
  uint64_t *ids = calloc((size_t)j->world, sizeof *ids);
  int rc =
      ids ? 0 : aa_error(AA_ENOMEM, "planner: no memory for the store of run %lld", (long long)j->run_id);
  for (int r = 0; ids && r < j->world; r++)
    ids[r] = j->ranks[r].executor;
  if (!rc) rc = aa__relay_open(p, j->id, j->run_id, j->world, ids, &j->relay);
  free(ids);
  if (rc) aa__planner_log(p, "job %lld: %s", (long long)j->id, aa_last_error());
}

void aa__relay_close(aa_relay_t *r) {
  if (!r) return;
  int waiting = 0;
  for (aa_relay_t **pr = &r->p->relays; *pr; pr = &(*pr)->next)
    if (*pr == r) {
      *pr = r->next;
      break;
    }
  for (relay_key_t *k = r->keys, *next; k; k = next) {
    next = k->next;
    free(k->key);
    free(k->value);
    free(k);
  }
  for (relay_wait_t *w = r->waits, *next; w; w = next) {
    next = w->next;
    waiting++;
    free(w->key);
    free(w);
  }
  if (waiting)
    aa__planner_log(r->p, "job %lld: run %lld ended with %d get%s of its store unanswered", (long long)r->job,
                    (long long)r->run, waiting, waiting > 1 ? "s" : "");
  free(r->members);
  free(r->pending);
  free(r);
}

static aa_relay_t *find_run(aa_planner_t *p, uint64_t run) {
  for (aa_relay_t *r = p->relays; r; r = r->next)
    if ((uint64_t)r->run == run) return r;
  return NULL;
}

static relay_key_t *find_key(aa_relay_t *r, const char *key) {
  for (relay_key_t *k = r->keys; k; k = k->next)
    if (!strcmp(k->key, key)) return k;
  return NULL;
}

static void send_value(aa_conn_t *c, uint64_t req, uint64_t run, const relay_key_t *k) {
  aa_msg_t m = {.type = AA_MSG_KV_VALUE, .id = req};
  m.kv_value = (aa_msg_kv_t){.run = run, .key = k->key, .value = {.p = k->value, .n = k->n}};
  aa__conn_send(c, &m);
}

/* Stores a key and answers the gets that waited for it. */
static void on_set(aa_relay_t *r, aa_conn_t *c, const aa_msg_t *m) {
  const aa_msg_kv_t *kv = &m->kv_set;
  char text[AA_PROTO_TEXT_MAX];
  relay_key_t *k = find_key(r, kv->key);
  if (k) {
    /* A rank that sends its set again (a retry) changes nothing. */
    if (k->n == kv->value.n && (!k->n || !memcmp(k->value, kv->value.p, k->n))) return;
    snprintf(text, sizeof text, "kv_set: key %s of run %lld is already set (a key is set once)", kv->key,
             (long long)r->run);
    aa__conn_send_error(c, m->id, AA_EINVAL, text);
    return;
  }
  size_t add = strlen(kv->key) + kv->value.n;
  if (r->nkeys >= r->max_keys || r->bytes + add > r->max_bytes) {
    snprintf(text, sizeof text,
             "kv_set: the store of run %lld is full (%d keys of %d, %zu bytes of %zu): key %s refused",
             (long long)r->run, r->nkeys, r->max_keys, r->bytes, r->max_bytes, kv->key);
    aa__conn_send_error(c, m->id, AA_EINVAL, text);
    return;
  }
  k = calloc(1, sizeof *k);
  if (k) k->key = strdup(kv->key);
  if (k && k->key) k->value = malloc(kv->value.n ? kv->value.n : 1);
  if (!k || !k->key || !k->value) {
    if (k) free(k->key);
    free(k);
    aa__conn_send_error(c, m->id, AA_ENOMEM, "kv_set: the planner has no memory for the key");
    return;
  }
  if (kv->value.n) memcpy(k->value, kv->value.p, kv->value.n);
  k->n = kv->value.n;
  k->next = r->keys;
  r->keys = k;
  r->nkeys++;
  r->bytes += add;
  for (relay_wait_t **pw = &r->waits; *pw;) {
    relay_wait_t *w = *pw;
    if (strcmp(w->key, k->key)) {
      pw = &w->next;
      continue;
    }
    *pw = w->next;
    r->pending[w->rank]--;
    aa_conn_t *e = aa__registry_find(r->p, w->executor);
    if (e && !e->dropped) send_value(e, w->req, (uint64_t)r->run, k);
    free(w->key);
    free(w);
  }
}

/* Answers a get now, or keeps it until its key is set. */
static void on_get(aa_relay_t *r, aa_conn_t *c, int rank, const aa_msg_t *m) {
  const aa_msg_kv_t *kv = &m->kv_get;
  relay_key_t *k = find_key(r, kv->key);
  if (k) {
    send_value(c, m->id, (uint64_t)r->run, k);
    return;
  }
  char text[AA_PROTO_TEXT_MAX];
  if (r->pending[rank] >= AA_RELAY_PENDING_MAX) {
    snprintf(text, sizeof text, "kv_get: more than %d gets of run %lld's store waiting at once",
             AA_RELAY_PENDING_MAX, (long long)r->run);
    aa__conn_fail(c, m->id, AA_EINVAL, text, NULL, 0);
    return;
  }
  relay_wait_t *w = calloc(1, sizeof *w);
  if (w) w->key = strdup(kv->key);
  if (!w || !w->key) {
    free(w);
    aa__conn_send_error(c, m->id, AA_ENOMEM, "kv_get: the planner has no memory to wait for the key");
    return;
  }
  w->executor = c->id;
  w->req = m->id;
  w->rank = rank;
  w->next = r->waits;
  r->waits = w;
  r->pending[rank]++;
}

void aa__relay_on_message(aa_conn_t *c, const aa_msg_t *m) {
  const aa_msg_kv_t *kv = m->type == AA_MSG_KV_SET ? &m->kv_set : &m->kv_get;
  const char *what = aa_msg_type_name(m->type);
  aa_relay_t *r = find_run(c->p, kv->run);
  int rank = -1;
  for (int i = 0; r && i < r->world && rank < 0; i++)
    if (r->members[i] == c->id) rank = i;
  if (rank < 0) {
    char text[256];
    snprintf(text, sizeof text, "%s: executor %llu is not a rank of a running gang's run %llu", what,
             (unsigned long long)c->id, (unsigned long long)kv->run);
    aa__conn_send_error(c, m->id, AA_EPERM, text);
    return;
  }
  if (m->type == AA_MSG_KV_SET)
    on_set(r, c, m);
  else
    on_get(r, c, rank, m);
}
