/* Symlink-safe file writing (common/file.h): every test works in a fresh
 * mkdtemp directory, plants symlinks to a "victim" file where an attacker
 * could, and checks that the victim is never written. */
#include "common/aa.h"
#include "common/file.h"
#include "tests/aa_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VICTIM_TEXT "root-only secret\n"

static char dir[64];

/* Path of name inside the test directory; valid until the next call with
 * the same slot (0..3). */
static const char *in_dir(int slot, const char *name) {
  static char buf[4][512];
  snprintf(buf[slot], sizeof buf[slot], "%s/%s", dir, name);
  return buf[slot];
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

/* The whole file as a string (empty when unreadable); valid until the next
 * call. */
static const char *read_text(const char *path) {
  static char buf[4096];
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return buf;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static void put_and_close(FILE *f, const char *text) {
  if (!f) return;
  fputs(text, f);
  CHECK(fclose(f) == 0);
}

static int is_regular_file(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Whether path is still a symlink to target. */
static int links_to(const char *path, const char *target) {
  char buf[512];
  ssize_t n = readlink(path, buf, sizeof buf - 1);
  if (n < 0) return 0;
  buf[n] = '\0';
  return strcmp(buf, target) == 0;
}

/* Entries of the test directory other than . and .., and the first one
 * found that starts with '.' (a leftover temporary) in *hidden. */
static int count_entries(char *hidden, size_t cap) {
  DIR *d = opendir(dir);
  int n = 0;
  if (hidden) hidden[0] = '\0';
  if (!d) return -1;
  for (struct dirent *e; (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    n++;
    if (hidden && e->d_name[0] == '.' && !hidden[0]) snprintf(hidden, cap, "%s", e->d_name);
  }
  closedir(d);
  return n;
}

/* Empties the test directory (it holds plain files and symlinks only). */
static void clear_dir(void) {
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) unlink(in_dir(3, e->d_name));
  closedir(d);
}

/* A fresh directory with the victim file in it. */
static int setup(void) {
  snprintf(dir, sizeof dir, "/tmp/aa_file_XXXXXX");
  if (!mkdtemp(dir)) return -1;
  write_text(in_dir(0, "victim"), VICTIM_TEXT);
  return 0;
}

static void teardown(void) {
  clear_dir();
  rmdir(dir);
}

AA_TEST(commit_replaces_a_symlink_at_the_final_name_not_its_target) {
  if (setup()) SKIP("mkdtemp failed");
  const char *victim = in_dir(0, "victim"), *path = in_dir(1, "out.json");
  CHECK(symlink(victim, path) == 0);
  aa_wfile_t w;
  CHECK_MSG(aa_wfile_open(&w, path, 0666) == 0, "%s", aa_last_error());
  if (w.f) fputs("new content\n", w.f);
  CHECK_MSG(aa_wfile_commit(&w) == 0, "%s", aa_last_error());
  aa_wfile_abort(&w); /* a no-op after commit */
  CHECK(!strcmp(read_text(victim), VICTIM_TEXT));
  CHECK(is_regular_file(path));
  CHECK(!strcmp(read_text(path), "new content\n"));
  CHECK(count_entries(NULL, 0) == 2);
  teardown();
}

AA_TEST(planted_temporary_names_are_never_touched) {
  if (setup()) SKIP("mkdtemp failed");
  const char *victim = in_dir(0, "victim");
  /* The old fixed temporary, and names one could guess from the new scheme. */
  const char *planted[] = {"out.json.tmp", ".out.json.tmp", ".out.json.0000000000000000.tmp",
                           ".out.json.ffffffffffffffff.tmp"};
  size_t np = sizeof planted / sizeof planted[0];
  for (size_t i = 0; i < np; i++)
    CHECK(symlink(victim, in_dir(1, planted[i])) == 0);
  for (int round = 0; round < 2; round++) { /* creating, then replacing */
    aa_wfile_t w;
    CHECK_MSG(aa_wfile_open(&w, in_dir(1, "out.json"), 0666) == 0, "%s", aa_last_error());
    if (w.f) fprintf(w.f, "round %d\n", round);
    CHECK_MSG(aa_wfile_commit(&w) == 0, "%s", aa_last_error());
  }
  CHECK(!strcmp(read_text(in_dir(1, "out.json")), "round 1\n"));
  CHECK(!strcmp(read_text(victim), VICTIM_TEXT));
  for (size_t i = 0; i < np; i++)
    CHECK_MSG(links_to(in_dir(1, planted[i]), victim), "%s", planted[i]);
  CHECK(count_entries(NULL, 0) == (int)np + 2);
  teardown();
}

AA_TEST(abort_leaves_no_temporary_and_the_old_file) {
  if (setup()) SKIP("mkdtemp failed");
  const char *path = in_dir(1, "state.json");
  write_text(path, "old\n");
  aa_wfile_t w;
  CHECK_MSG(aa_wfile_open(&w, path, 0666) == 0, "%s", aa_last_error());
  char hidden[256];
  CHECK(count_entries(hidden, sizeof hidden) == 3 && !strncmp(hidden, ".state.json.", 12));
  if (w.f) fputs("half of the new", w.f);
  aa_wfile_abort(&w);
  aa_wfile_abort(&w); /* twice is harmless */
  CHECK(count_entries(hidden, sizeof hidden) == 2);
  CHECK_MSG(!hidden[0], "left behind: %s", hidden);
  CHECK(!strcmp(read_text(path), "old\n"));
  /* Committing what was aborted is refused, and touches nothing. */
  CHECK(aa_wfile_commit(&w) == AA_EINVAL);
  teardown();
}

AA_TEST(open_refuses_bad_paths_and_abort_after_it_is_a_no_op) {
  if (setup()) SKIP("mkdtemp failed");
  aa_wfile_t w;
  CHECK(aa_wfile_open(&w, in_dir(1, "missing/out.json"), 0666) == AA_ENOENT);
  CHECK(strstr(aa_last_error(), "missing/out.json: cannot create"));
  aa_wfile_abort(&w);
  CHECK(aa_wfile_open(&w, in_dir(1, "sub/"), 0666) == AA_EINVAL);
  aa_wfile_abort(&w);
  CHECK(aa_wfile_open(&w, "", 0666) == AA_EINVAL);
  aa_wfile_abort(&w);
  CHECK(count_entries(NULL, 0) == 1);
  teardown();
}

AA_TEST(commit_into_a_removed_directory_fails_naming_the_path) {
  if (setup()) SKIP("mkdtemp failed");
  char sub[128];
  snprintf(sub, sizeof sub, "%s/sub", dir);
  CHECK(mkdir(sub, 0700) == 0);
  char path[160], tmp[400];
  snprintf(path, sizeof path, "%s/out.bin", sub);
  aa_wfile_t w;
  CHECK_MSG(aa_wfile_open(&w, path, 0666) == 0, "%s", aa_last_error());
  if (w.f) fputs("payload", w.f);
  /* The temporary must go before the directory can. */
  snprintf(tmp, sizeof tmp, "%s/%s", sub, w.tmp);
  CHECK(unlink(tmp) == 0);
  CHECK(rmdir(sub) == 0);
  CHECK(aa_wfile_commit(&w) == AA_EIO);
  CHECK_MSG(strstr(aa_last_error(), path) && strstr(aa_last_error(), "rename failed"), "%s", aa_last_error());
  aa_wfile_abort(&w);
  teardown();
}

AA_TEST(openat_writes_relative_to_a_borrowed_directory_fd) {
  if (setup()) SKIP("mkdtemp failed");
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  CHECK(dfd >= 0);
  CHECK(symlink(in_dir(0, "victim"), in_dir(1, "shard.bin")) == 0);
  aa_wfile_t w;
  CHECK_MSG(aa_wfile_openat(&w, dfd, "shard.bin", 0600) == 0, "%s", aa_last_error());
  if (w.f) fputs("tokens", w.f);
  CHECK_MSG(aa_wfile_commit(&w) == 0, "%s", aa_last_error());
  CHECK(!strcmp(read_text(in_dir(1, "shard.bin")), "tokens") && is_regular_file(in_dir(1, "shard.bin")));
  CHECK(!strcmp(read_text(in_dir(0, "victim")), VICTIM_TEXT));
  struct stat st;
  CHECK(stat(in_dir(1, "shard.bin"), &st) == 0 && (st.st_mode & 0077) == 0);
  /* The caller's descriptor is still its own and still open. */
  CHECK(fcntl(dfd, F_GETFD) >= 0);
  CHECK(aa_wfile_openat(&w, dfd, "a/b", 0600) == AA_EINVAL);
  CHECK(aa_wfile_openat(&w, dfd, "..", 0600) == AA_EINVAL);
  aa_wfile_abort(&w);
  close(dfd);
  CHECK(count_entries(NULL, 0) == 2);
  teardown();
}

AA_TEST(open_write_refuses_a_symlink_and_leaves_its_target) {
  if (setup()) SKIP("mkdtemp failed");
  const char *victim = in_dir(0, "victim"), *path = in_dir(1, "losses.txt");
  CHECK(symlink(victim, path) == 0);
  for (int append = 0; append < 2; append++) {
    FILE *f = NULL;
    CHECK(aa_file_open_write(path, append, 0666, &f) == AA_EIO && !f);
    char want[600];
    snprintf(want, sizeof want, "%s is a symbolic link; refusing to write through it", path);
    CHECK_MSG(strstr(aa_last_error(), want), "%s", aa_last_error());
  }
  /* A dangling symlink would otherwise create its target. */
  CHECK(symlink(in_dir(2, "created"), in_dir(1, "train.log")) == 0);
  FILE *f = NULL;
  CHECK(aa_file_open_write(in_dir(1, "train.log"), false, 0666, &f) == AA_EIO && !f);
  CHECK(access(in_dir(2, "created"), F_OK) != 0);
  CHECK(!strcmp(read_text(victim), VICTIM_TEXT));
  teardown();
}

AA_TEST(open_write_truncates_and_appends_regular_files) {
  if (setup()) SKIP("mkdtemp failed");
  const char *path = in_dir(1, "log.txt");
  FILE *f = NULL;
  CHECK_MSG(aa_file_open_write(path, false, 0600, &f) == 0, "%s", aa_last_error());
  put_and_close(f, "first\n");
  f = NULL;
  CHECK(aa_file_open_write(path, true, 0600, &f) == 0);
  put_and_close(f, "second\n");
  CHECK(!strcmp(read_text(path), "first\nsecond\n"));
  f = NULL;
  CHECK(aa_file_open_write(path, false, 0600, &f) == 0);
  put_and_close(f, "x\n");
  CHECK(!strcmp(read_text(path), "x\n"));
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
  teardown();
}

AA_TEST(open_write_allows_dev_null_and_refuses_other_non_files) {
  if (setup()) SKIP("mkdtemp failed");
  FILE *f = NULL;
  CHECK_MSG(aa_file_open_write("/dev/null", false, 0666, &f) == 0, "%s", aa_last_error());
  put_and_close(f, "nowhere\n");
  f = NULL;
  /* A FIFO is refused at once rather than waited on for a reader. */
  CHECK(mkfifo(in_dir(1, "fifo"), 0600) == 0);
  CHECK(aa_file_open_write(in_dir(1, "fifo"), true, 0666, &f) == AA_EIO && !f);
  CHECK(aa_file_open_write(dir, false, 0666, &f) == AA_EIO && !f);
  CHECK(aa_file_open_write(in_dir(1, "missing/x.log"), false, 0666, &f) == AA_ENOENT && !f);
  CHECK(strstr(aa_last_error(), "missing/x.log"));
  teardown();
}

AA_TEST(dir_open_owned_makes_only_the_owners_directory_and_checks_its_owner) {
  if (setup()) SKIP("mkdtemp failed");
  uid_t me = geteuid(), other = me == 65534 ? 65533 : 65534, uid = 0;
  int fd = -1;
  /* The owner's directory: open, its owner read from the descriptor. */
  CHECK_MSG(aa_dir_open_owned(&fd, &uid, "out_dir", dir, me, false) == 0, "%s", aa_last_error());
  CHECK(fd >= 0 && uid == me && fcntl(fd, F_GETFD) >= 0);
  if (fd >= 0) close(fd);
  /* Root may use any directory; another user may not, and is told whose it is. */
  CHECK(aa_dir_open_owned(NULL, &uid, "out_dir", dir, 0, false) == 0);
  uid = 0;
  CHECK(aa_dir_open_owned(NULL, &uid, "out_dir", dir, other, false) == AA_EPERM && uid == me);
  char want[600];
  snprintf(want, sizeof want, "out_dir %s belongs to uid %u, not to uid %u", dir, (unsigned)me,
           (unsigned)other);
  CHECK_MSG(strstr(aa_last_error(), want), "%s", aa_last_error());
  /* A missing one is made only when asked, and only when it would be the owner's. */
  const char *sub = in_dir(1, "a/b");
  CHECK(aa_dir_open_owned(NULL, &uid, "out_dir", sub, me, false) == AA_ENOENT);
  CHECK(aa_dir_open_owned(NULL, &uid, "out_dir", sub, other, true) == AA_ENOENT);
  CHECK(access(in_dir(2, "a"), F_OK) != 0);
  fd = -1;
  CHECK_MSG(aa_dir_open_owned(&fd, &uid, "out_dir", sub, me, true) == 0, "%s", aa_last_error());
  CHECK(fd >= 0 && uid == me);
  if (fd >= 0) close(fd);
  CHECK(rmdir(sub) == 0 && rmdir(in_dir(2, "a")) == 0);
  /* A file is not a directory. */
  CHECK(aa_dir_open_owned(NULL, &uid, "out_dir", in_dir(1, "victim"), me, true) == AA_EINVAL);
  CHECK(!strcmp(read_text(in_dir(1, "victim")), VICTIM_TEXT));
  teardown();
}

int main(void) {
  RUN(commit_replaces_a_symlink_at_the_final_name_not_its_target);
  RUN(planted_temporary_names_are_never_touched);
  RUN(abort_leaves_no_temporary_and_the_old_file);
  RUN(open_refuses_bad_paths_and_abort_after_it_is_a_no_op);
  RUN(commit_into_a_removed_directory_fails_naming_the_path);
  RUN(openat_writes_relative_to_a_borrowed_directory_fd);
  RUN(open_write_refuses_a_symlink_and_leaves_its_target);
  RUN(open_write_truncates_and_appends_regular_files);
  RUN(open_write_allows_dev_null_and_refuses_other_non_files);
  RUN(dir_open_owned_makes_only_the_owners_directory_and_checks_its_owner);
  return aa_test_summary();
}
