package jobtype

import "testing"

func TestPieceEndKeepsACharacterCutInTwoForTheNextPiece(t *testing.T) {
	for _, tc := range []struct {
		b    string
		want int
	}{
		{"", 0},
		{"abc", 3},
		{"ab€", 5},        // whole
		{"ab\xe2\x82", 2}, // the first two bytes of €
		{"ab\xe2", 2},
		{"ab😀"[:5], 2}, // the first three bytes of 😀
		{"ab😀", 6},
		{"ab\x82\x82", 4}, // no UTF-8: cut where it falls
		{"\x82\x82\x82\x82\x82", 5},
	} {
		if got := PieceEnd([]byte(tc.b)); got != tc.want {
			t.Errorf("PieceEnd(%q) = %d, want %d", tc.b, got, tc.want)
		}
	}
}
