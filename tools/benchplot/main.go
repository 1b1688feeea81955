// Command benchplot draws the parked-calls figures of "jobwatch bench
// --json" as a PNG: per server (one column each), the wake-up latency
// after the worker's reply (WaitJob and WatchJob, p50 and p99) and the
// short-call p99, against the number of parked calls. Each row shares
// its y axis across servers, so the columns compare at a glance.
//
//	jobwatch bench --json > bench.json
//	cd tools/benchplot && go run . -o ../../docs/bench-parked.png < ../../bench.json
//
// It is a module of its own so the plotting library stays out of
// jobwatch's go.mod.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The part of the bench's JSON this reads (internal/bench/report.go).
type benchResult struct {
	Servers []string `json:"servers"`
	Machine struct {
		CPU   string `json:"cpu"`
		Cores int    `json:"cores"`
	} `json:"machine"`
	Results map[string]struct {
		Parked []struct {
			N       int   `json:"n"`
			Waits   stage `json:"waits"`
			Watches stage `json:"watches"`
		} `json:"parked"`
	} `json:"results"`
}

type stage struct {
	ShortP99MS float64 `json:"short_call_p99_ms"`
	WakeP50MS  float64 `json:"wake_p50_ms"`
	WakeP99MS  float64 `json:"wake_p99_ms"`
}

func main() {
	out := flag.String("o", "bench-parked.png", "PNG `file` to write")
	flag.Parse()
	if err := run(os.Stdin, *out); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
}

// series is one line: a label, a colour, a dash pattern and its points.
type series struct {
	label  string
	color  color.Color
	dashes []vg.Length
	pts    plotter.XYs
}

var (
	waitColor  = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	watchColor = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	p50Dashes  = []vg.Length{vg.Points(4), vg.Points(3)}
)

func run(in io.Reader, out string) error {
	var r benchResult
	if err := json.NewDecoder(in).Decode(&r); err != nil {
		return fmt.Errorf("read the bench's JSON: %w", err)
	}
	var cols []string
	for _, s := range r.Servers {
		if len(r.Results[s].Parked) > 0 {
			cols = append(cols, s)
		}
	}
	if len(cols) == 0 {
		return errors.New("no parked figures in the input: run jobwatch bench --json with the parked scenario")
	}

	rows := [2][]*plot.Plot{}
	for _, s := range cols {
		var wake, short []series
		add := func(list *[]series, label string, c color.Color, dashes []vg.Length, get func(w, x stage) (float64, float64), watch bool) {
			sr := series{label: label, color: c, dashes: dashes}
			for _, p := range r.Results[s].Parked {
				a, b := get(p.Waits, p.Watches)
				y := a
				if watch {
					y = b
				}
				sr.pts = append(sr.pts, plotter.XY{X: float64(p.N), Y: y})
			}
			*list = append(*list, sr)
		}
		p50 := func(w, x stage) (float64, float64) { return w.WakeP50MS, x.WakeP50MS }
		p99 := func(w, x stage) (float64, float64) { return w.WakeP99MS, x.WakeP99MS }
		sp99 := func(w, x stage) (float64, float64) { return w.ShortP99MS, x.ShortP99MS }
		add(&wake, "WaitJob p99", waitColor, nil, p99, false)
		add(&wake, "WaitJob p50", waitColor, p50Dashes, p50, false)
		add(&wake, "WatchJob p99", watchColor, nil, p99, true)
		add(&wake, "WatchJob p50", watchColor, p50Dashes, p50, true)
		add(&short, "GetJob p99, WaitJob parked", waitColor, nil, sp99, false)
		add(&short, "GetJob p99, WatchJob parked", watchColor, nil, sp99, true)

		pw, err := newPlot(s+": wake-up after the worker's reply", "ms", wake)
		if err != nil {
			return err
		}
		ps, err := newPlot(s+": short-call p99", "ms", short)
		if err != nil {
			return err
		}
		rows[0] = append(rows[0], pw)
		rows[1] = append(rows[1], ps)
	}
	for _, row := range rows {
		shareY(row)
	}

	w, h := vg.Length(len(cols))*4.2*vg.Inch, 7*vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))
	dc := draw.New(img)
	// White, not transparent: the PNG reads the same on a dark page.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	tiles := draw.Tiles{Rows: 2, Cols: len(cols), PadTop: vg.Points(8), PadBottom: vg.Points(8),
		PadLeft: vg.Points(8), PadRight: vg.Points(12), PadX: vg.Points(16), PadY: vg.Points(16)}
	canvases := plot.Align([][]*plot.Plot{rows[0], rows[1]}, tiles, dc)
	for i, row := range rows {
		for j, p := range row {
			p.Draw(canvases[i][j])
		}
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// newPlot draws the series with points on a plot whose x axis is the
// number of parked calls.
func newPlot(title, unit string, list []series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "parked calls"
	p.Y.Label.Text = unit
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	for _, s := range list {
		l, pts, err := plotter.NewLinePoints(s.pts)
		if err != nil {
			return nil, err
		}
		l.Color, l.Dashes, l.Width = s.color, s.dashes, vg.Points(1.5)
		pts.Color, pts.Shape = s.color, draw.CircleGlyph{}
		pts.Radius = vg.Points(2.5)
		p.Add(l, pts)
		p.Legend.Add(s.label, l)
	}
	p.X.Min = 0
	p.X.Tick.Marker = parkedTicks{}
	return p, nil
}

// shareY gives every plot of a row the same y range, from 0 (or the
// lowest value, when a caller learnt before the worker) to a little above
// the highest value, so the legend does not hide the lines.
func shareY(row []*plot.Plot) {
	lo, hi := 0.0, math.Inf(-1)
	for _, p := range row {
		lo = min(lo, p.Y.Min)
		hi = max(hi, p.Y.Max)
	}
	for _, p := range row {
		p.Y.Min, p.Y.Max = lo, hi*1.45
	}
}

// parkedTicks labels the counts the bench parks by default in thousands
// (1k … 20k), and any other count in the range as it is.
type parkedTicks struct{}

func (parkedTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for _, n := range []float64{0, 1000, 5000, 10000, 15000, 20000} {
		if n < lo || n > hi {
			continue
		}
		label := fmt.Sprintf("%gk", n/1000)
		if n == 0 {
			label = "" // the baseline's point; "0" would run into "1k"
		}
		ts = append(ts, plot.Tick{Value: n, Label: label})
	}
	if len(ts) < 3 { // not the default counts: let gonum choose
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	return ts
}
