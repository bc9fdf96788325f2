/* Admission of TCP peers before their hello (docs/service.md "Limits").
 *
 * Until its hello is accepted a TCP peer holds one of max_unauthenticated
 * waiting slots, and anybody who can reach the port can open such
 * connections and say nothing for the hello deadline. Refusing newcomers
 * once the slots are taken would let one silent local user lock out every
 * token holder and remote executor, for as long as they repeat it. So the
 * planner makes room instead of refusing:
 *
 *   - a newcomer whose source already holds its share of the slots
 *     (max_unauthenticated / 8, at least 2) displaces that source's oldest
 *     waiting connection;
 *   - otherwise, when every slot is taken (or every TCP connection), it
 *     displaces the oldest waiting connection of all.
 *
 * Only the silent are displaced, and below the TCP connection cap not the
 * newest: a connection with bytes waiting in its socket (a hello that
 * arrived since the loop last read, which the loop reads next), or
 * accepted less than AA_ADMIT_GRACE_S ago (its peer may not have been
 * scheduled between connect and write on a busy host), is passed over for
 * an older silent one. When none of the oldest AA_ADMIT_SCAN can go, the
 * newcomer is let in over the soft caps (the share and
 * max_unauthenticated) and those bytes are read in the loop's next turn;
 * only the TCP connection cap is hard, and at it the newcomer is refused.
 *
 * A real peer sends its hello as soon as it has connected, so it is silent
 * for a moment at most, inside the grace; a flood from one source only
 * cycles that source's share (plus what it opens within a grace) and never
 * displaces the peers of another source. At the cap the oldest silent
 * connection goes whatever its age, so that a burst of new ones cannot
 * hold the cap and refuse every newcomer; there a peer's hello races the
 * next newcomer, as it did everywhere before the grace.
 *
 * A source is an IPv4 address, with all of 127.0.0.0/8 as one (any local
 * user may connect from any of it), or the /64 an IPv6 address lies in (a
 * host's usual allotment); an IPv4-mapped IPv6 address is its IPv4
 * address. */
#include "planner_internal.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

/* Waiting connections looked at for a silent one before a newcomer is let
 * in over the soft caps (or, at the hard cap, the oldest goes). */
#define AA_ADMIT_SCAN 32
/* Seconds after its accept during which a connection is not displaced
 * (below the cap). Without it, in a suite run two tests at a time on 2
 * cores, one of tests/cli/test_daemon_hostile.sh's 10 `status` calls was
 * closed between its connect and its hello by the flood from its own
 * address. */
#define AA_ADMIT_GRACE_S 0.25

struct aa_source {
  struct aa_source *next; /* in its hash bucket */
  unsigned char key[17];  /* family (4 or 6), then the address bytes that count */
  int n;                  /* its connections waiting to say hello */
  aa_conn_t *oldest, *newest;
};

/* The key of the source a peer address belongs to. */
static void source_key(const struct sockaddr *sa, unsigned char key[17]) {
  memset(key, 0, 17);
  const unsigned char *v4 = NULL;
  if (sa->sa_family == AF_INET) {
    v4 = (const unsigned char *)&((const struct sockaddr_in *)sa)->sin_addr;
  } else if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(a)) {
      v4 = a->s6_addr + 12;
    } else {
      key[0] = 6;
      memcpy(key + 1, a->s6_addr, 8); /* the /64 */
      return;
    }
  }
  if (!v4) return; /* another family: every such peer is one source */
  key[0] = 4;
  if (v4[0] == 127)
    key[1] = 127;
  else
    memcpy(key + 1, v4, 4);
}

static unsigned bucket_of(const unsigned char key[17]) {
  uint64_t h = aa_fnv1a(AA_FNV_INIT, key, 17);
  return (unsigned)(h % AA_PLANNER_SOURCE_BUCKETS);
}

static struct aa_source *find_source(const aa_planner_t *p, const unsigned char key[17]) {
  for (struct aa_source *s = p->sources[bucket_of(key)]; s; s = s->next)
    if (!memcmp(s->key, key, 17)) return s;
  return NULL;
}

int aa__admit_share(const aa_planner_t *p) {
  int share = p->lim.max_unauthenticated / 8;
  return share < 2 ? 2 : share;
}

/* Whether c has bytes waiting in its socket that the loop has not read. */
static bool has_unread(aa_conn_t *c) {
  uv_os_fd_t fd;
  int n = 0;
  return !uv_fileno(&c->h.handle, &fd) && !ioctl(fd, FIONREAD, &n) && n > 0;
}

/* The oldest silent connection past its grace among the first
 * AA_ADMIT_SCAN of a list (by_source: a source's, else the planner's), or
 * NULL. The lists run oldest first, so the first one inside its grace ends
 * the search. */
static aa_conn_t *pick(aa_conn_t *oldest, bool by_source, double grace) {
  const double now = aa_now();
  int k = 0;
  for (aa_conn_t *c = oldest; c && k < AA_ADMIT_SCAN; c = by_source ? c->src_next : c->wait_next, k++) {
    if (now - c->accepted_at < grace) break;
    if (!has_unread(c)) return c;
  }
  return NULL;
}

aa_conn_t *aa__admit_make_room(aa_planner_t *p, const struct sockaddr *sa, bool full, int *source_n) {
  unsigned char key[17];
  source_key(sa, key);
  struct aa_source *s = find_source(p, key);
  *source_n = s ? s->n : 0;
  aa_conn_t *v = NULL;
  /* At the TCP cap there is no grace: a burst of young silent connections
   * must not lock newcomers out. */
  const double grace = full ? 0.0 : AA_ADMIT_GRACE_S;
  if (s && s->n >= aa__admit_share(p)) v = pick(s->oldest, true, grace);
  if (!v && (full || p->ntcp_hello >= p->lim.max_unauthenticated)) {
    v = pick(p->wait_oldest, false, grace);
    *source_n = 0; /* the victim need not be of the newcomer's source */
  }
  return v;
}

int aa__admit_enter(aa_conn_t *c, const struct sockaddr *sa) {
  aa_planner_t *p = c->p;
  unsigned char key[17];
  source_key(sa, key);
  struct aa_source *s = find_source(p, key);
  if (!s) {
    if (!(s = calloc(1, sizeof *s))) return AA_ENOMEM;
    memcpy(s->key, key, sizeof s->key);
    unsigned b = bucket_of(key);
    s->next = p->sources[b];
    p->sources[b] = s;
  }
  c->src = s;
  c->src_prev = s->newest;
  c->src_next = NULL;
  if (s->newest)
    s->newest->src_next = c;
  else
    s->oldest = c;
  s->newest = c;
  s->n++;
  c->wait_prev = p->wait_newest;
  c->wait_next = NULL;
  if (p->wait_newest)
    p->wait_newest->wait_next = c;
  else
    p->wait_oldest = c;
  p->wait_newest = c;
  p->ntcp_hello++;
  return 0;
}

void aa__admit_leave(aa_conn_t *c) {
  aa_planner_t *p = c->p;
  struct aa_source *s = c->src;
  if (!s) return;
  if (c->src_prev)
    c->src_prev->src_next = c->src_next;
  else
    s->oldest = c->src_next;
  if (c->src_next)
    c->src_next->src_prev = c->src_prev;
  else
    s->newest = c->src_prev;
  if (c->wait_prev)
    c->wait_prev->wait_next = c->wait_next;
  else
    p->wait_oldest = c->wait_next;
  if (c->wait_next)
    c->wait_next->wait_prev = c->wait_prev;
  else
    p->wait_newest = c->wait_prev;
  c->src = NULL;
  c->src_prev = c->src_next = c->wait_prev = c->wait_next = NULL;
  p->ntcp_hello--;
  if (--s->n == 0) { /* a source without waiting connections is forgotten */
    struct aa_source **ps = &p->sources[bucket_of(s->key)];
    while (*ps != s)
      ps = &(*ps)->next;
    *ps = s->next;
    free(s);
  }
}
