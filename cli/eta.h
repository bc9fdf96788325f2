/* The progress line's ETA (cmd_submit.c): the time a search has left from
 * the dry runs it has finished, and its text. Pure arithmetic, no I/O, so
 * tests/test_eta.c checks it as a unit. */
#ifndef AA_CLI_ETA_H
#define AA_CLI_ETA_H

/* Seconds a search has left: `done` dry runs have ended within `done_s`
 * seconds of the first one's start (dispatch time between runs included),
 * `left` runs remain counting the one in flight, which has run for `cur_s`.
 * Each run left is taken to last the mean of those done; the one in flight
 * is owed that mean less what it has run, but never less than nothing, so
 * the estimate is at least (left - 1) means. Negative (unknown) before the
 * first run ends, when nothing is left to count or an input is not a
 * finite non-negative number. */
double aa_eta_search(long long done, double done_s, long long left, double cur_s);

/* Seconds left in a run of `total` steps at step `step`, from the `steps`
 * steps seen over `elapsed_s` seconds: the rate so far times the steps
 * left. Negative (unknown) when no step has been timed. */
double aa_eta_steps(unsigned long long steps, double elapsed_s, unsigned long long step,
                    unsigned long long total);

/* "?" for an unknown (negative, NaN) or absurd (over 10^7 s) estimate,
 * else "42s", "3m07s" or "2h05m". */
void aa_eta_format(char buf[32], double s);

#endif
