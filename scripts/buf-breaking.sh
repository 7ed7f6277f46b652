#!/bin/sh
# `buf breaking` (npm run lint): the contract in proto/ against the one on the
# main branch, with buf.yaml's rules (FILE: no field, message, enum value or
# service renamed, renumbered or removed; names and JSON names included, since
# stored documents and REST use the JSON names).
#
# The main branch's proto/ and buf.yaml are taken with `git archive`, which
# works in a shallow clone, and given this checkout's node_modules for the
# google/api and google/rpc imports (buf's own `.git#branch=main` input would
# look for them in the commit, where they are not).
#
# Compared with: $BUF_BREAKING_AGAINST when set (a branch, tag or commit),
# else `main`, else `origin/main`. When none of them is in the checkout (not a
# git clone, or a single-branch clone of another branch) the check is skipped
# with one line saying so; `git fetch origin main:main` makes it run.
set -eu
cd "$(dirname "$0")/.."

against=""
for candidate in ${BUF_BREAKING_AGAINST:-main origin/main}; do
  if git rev-parse --verify --quiet "${candidate}^{commit}" >/dev/null 2>&1; then
    against=$candidate
    break
  fi
done
if [ -z "$against" ]; then
  if [ -n "${BUF_BREAKING_AGAINST:-}" ]; then
    echo "buf breaking: BUF_BREAKING_AGAINST=${BUF_BREAKING_AGAINST} names no commit here" >&2
    exit 1
  fi
  echo "buf breaking: skipped, this checkout has no main branch to compare the contract with (git fetch origin main:main)"
  exit 0
fi

previous=$(mktemp -d)
trap 'rm -rf "$previous"' EXIT
git archive "$against" -- proto buf.yaml | tar -x -C "$previous"
ln -s "$PWD/node_modules" "$previous/node_modules"
node_modules/.bin/buf breaking --against "$previous"
