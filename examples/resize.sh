#!/bin/sh
# resize.sh is the job command the README's worker example runs:
#
#   jobwatch worker --kind resize --exec ./examples/resize.sh
#   jobwatch submit resize --payload '"cat.png"' --wait
#
# It speaks the protocol of "jobwatch worker --exec" (jobwatch help worker):
#   stdin   the payload: a JSON string naming an image, such as "cat.png"
#   stdout  "progress PERCENT STEP" lines; "error TYPE MESSAGE" names a
#           failure; the last JSON line is the job's result
#   exit    0 done; 75 try again later (with attempts left); other: failed
#
# With ImageMagick's convert installed and the image present (relative to
# the worker's directory) it writes a copy at half the size. Otherwise it
# says so on stderr and only names the output, so the example runs
# anywhere: replace the convert line with your own work.
set -eu

payload=$(cat)
# A JSON string without escapes is enough for a file name here; anything
# else is refused with a reason the caller can read.
image=$(printf '%s\n' "$payload" | sed -n 's/^[[:space:]]*"\([^"\\]*\)"[[:space:]]*$/\1/p')
if [ -z "$image" ]; then
	echo "error BadPayload the payload must be a JSON string naming an image, such as \"cat.png\""
	exit 1
fi
case "$image" in
-* | /* | ../* | */../* | *"/.." | ..)
	# A payload names an image in the worker's directory, nothing else:
	# not an option to convert, not a path out of the directory.
	echo "error BadPayload the image must be a file name in the worker's directory, not $image"
	exit 1
	;;
esac
case "$image" in
*.*) out="${image%.*}-small.${image##*.}" ;;
*) out="$image-small" ;;
esac

echo "progress 10 reading $image"
if [ -f "$image" ] && command -v convert >/dev/null 2>&1; then
	echo "progress 40 resizing $image"
	if ! convert "$image" -resize 50% "$out"; then
		# A busy or broken converter may do better next time.
		echo "error ResizeFailed convert could not resize $image"
		exit 75
	fi
else
	echo "resize.sh: no $image here or no ImageMagick: naming the output only" >&2
fi
echo "progress 90 done: $out"
printf '"%s"\n' "$out"
