/* The progress line's ETA (eta.h). */
#include "eta.h"

#include <math.h>
#include <stdio.h>

#define ETA_MAX_S 1e7 /* past this (about 4 months) an estimate says nothing */

double aa_eta_search(long long done, double done_s, long long left, double cur_s) {
  if (done < 1 || left < 1 || !isfinite(done_s) || !isfinite(cur_s) || done_s < 0 || cur_s < 0) return -1;
  double mean = done_s / (double)done;
  double current = mean - cur_s;
  if (current < 0) current = 0;
  return current + mean * (double)(left - 1);
}

double aa_eta_steps(unsigned long long steps, double elapsed_s, unsigned long long step,
                    unsigned long long total) {
  if (!steps || !isfinite(elapsed_s) || elapsed_s <= 0 || step > total) return -1;
  return elapsed_s / (double)steps * (double)(total - step);
}

void aa_eta_format(char buf[32], double s) {
  if (!(s >= 0) || s > ETA_MAX_S)
    snprintf(buf, 32, "?");
  else if (s < 59.5)
    snprintf(buf, 32, "%.0fs", s);
  else if (lround(s) < 3600) {
    int t = (int)lround(s);
    snprintf(buf, 32, "%dm%02ds", t / 60, t % 60);
  } else {
    int m = (int)lround(s / 60);
    snprintf(buf, 32, "%dh%02dm", m / 60, m % 60);
  }
}
