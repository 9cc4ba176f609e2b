#!/bin/sh
# The repository speaks of the project alone, to a user: its documents name no issue by number, no
# working session, no machine kind of the place the work was done. A word a user cannot know fails,
# with the line.
#   docs_speak_to_users.sh SOURCE_DIR
set -eu
src=$1
cd "$src"
found=$(grep -n -i -E "issue [0-9]+|issue's|\bsession\b|sessions\b|nvidia-h[0-9]+-|\bthe seed's\b|\bfifth state\b" \
    README.md CHANGELOG.md docs/*.md traces/README.md 2>/dev/null || true)
if [ -n "$found" ]; then
    echo "$found"
    echo "FAIL: words a user cannot know (an issue's number, a session, a machine kind): say what they mean"
    exit 1
fi
echo "the documents speak to users"
