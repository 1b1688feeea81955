// Package editdist measures how far one short name is from another, for
// the "did you mean" of a mistyped field, command or flag.
package editdist

// Distance is the optimal string alignment distance of a and b: the
// letters inserted, deleted, replaced or swapped with their neighbour to
// make one the other ("sumbit" is one swap from "submit"). Names are
// short, so it is quadratic; past 64 letters it gives the longer
// length, as no name is that long.
func Distance(a, b string) int {
	ar, br := []rune(a), []rune(b)
	if len(ar) > 64 || len(br) > 64 {
		return max(len(ar), len(br))
	}
	prev2 := make([]int, len(br)+1)
	prev := make([]int, len(br)+1)
	cur := make([]int, len(br)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ar); i++ {
		cur[0] = i
		for j := 1; j <= len(br); j++ {
			cost := 1
			if ar[i-1] == br[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ar[i-1] == br[j-2] && ar[i-2] == br[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(br)]
}
