# Shared by the CLI tests (sourced, not run): a temporary directory removed
# on exit, pass/fail counters, expect, and finish.

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

# expect CODE PATTERN CMD...: runs CMD, checks its exit code and that
# stderr+stdout contains PATTERN (grep -E).
expect() {
  local code=$1 pat=$2; shift 2
  capture "$@"
  expect_captured "$code" "$pat"
}

# capture CMD...: runs CMD once and keeps its exit code and stderr+stdout,
# for expect_captured: a slow command checked for several things.
capture() {
  captured_cmd="$*"
  captured=$("$@" 2>&1); captured_rc=$?
}

# expect_captured CODE PATTERN: expect's checks on what capture kept.
expect_captured() {
  local code=$1 pat=$2
  if [ "$captured_rc" = "$code" ] && grep -Eiq -- "$pat" <<<"$captured"; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "FAIL: $captured_cmd -> exit $captured_rc (want $code), output:"; echo "$captured" | head -5
    echo "  (wanted /$pat/)"
  fi
}
