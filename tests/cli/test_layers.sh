#!/usr/bin/env bash
# The include direction between the source folders (tests/check_layers.py):
# every `#include` across folders must be one its folder's README allows, and
# the check itself must catch a planted upward include.
set -u
SRC=${AA_SOURCE_DIR:?set AA_SOURCE_DIR to the source tree}
rc=0
/usr/bin/python3 "$SRC/tests/check_layers.py" "$SRC" || rc=1
/usr/bin/python3 "$SRC/tests/check_layers.py" --self-test "$SRC" || rc=1
exit $rc
