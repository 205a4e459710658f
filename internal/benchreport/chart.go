package benchreport

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Series is one line of a [Chart]: the points (X[i], Y[i]) joined in the
// order given, named in the legend.
type Series struct {
	// Name labels the series in the legend.
	Name string
	// X and Y are the coordinates; they must have the same length and
	// hold only finite values.
	X, Y []float64
}

// Chart is one panel of the image drawn by [WritePNG].
type Chart struct {
	// Title is shown above the panel.
	Title string
	// XLabel and YLabel name the axes, with their units.
	XLabel, YLabel string
	// Series are drawn in order, each in its own colour and marker. A
	// series without points is left out.
	Series []Series
	// Target, when not nil, is drawn as a dashed horizontal line across
	// the panel at that Y value, labelled in the legend. The Y axis is
	// stretched to include it.
	Target *float64
}

// WritePNG draws charts as panels of one PNG image of width × height pixels
// and writes it to path, replacing any file there. Up to three charts sit
// side by side, four make a 2×2 grid, and more fill rows three panels wide.
//
// It returns an error, and writes nothing, when there are no charts, the
// size is not positive, or a series or target is invalid (X and Y of
// different lengths, NaN or infinite values). The same input gives the same
// bytes.
func WritePNG(path string, charts []Chart, width, height int) (err error) {
	if len(charts) == 0 {
		return errors.New("benchreport: write png: no charts")
	}
	if width <= 0 || height <= 0 {
		return fmt.Errorf("benchreport: write png: size %dx%d is not positive", width, height)
	}
	cols := gridColumns(len(charts))
	rows := (len(charts) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for r := range plots {
		plots[r] = make([]*plot.Plot, cols)
	}
	for i, c := range charts {
		p, err := c.plot()
		if err != nil {
			return fmt.Errorf("benchreport: write png: chart %d (%q): %w", i, c.Title, err)
		}
		plots[i/cols][i%cols] = p
	}

	// Giving the canvas its image fixes the size in pixels exactly, rather
	// than by rounding a length in points.
	img := vgimg.NewWith(vgimg.UseImage(image.NewRGBA(image.Rect(0, 0, width, height))))
	dc := draw.New(img)
	pad := vg.Points(6)
	tiles := draw.Tiles{
		Rows: rows, Cols: cols,
		PadX: 2 * pad, PadY: 2 * pad,
		PadTop: pad, PadBottom: pad, PadLeft: pad, PadRight: pad,
	}
	canvases := plot.Align(plots, tiles, dc)
	for r := range plots {
		for c, p := range plots[r] {
			if p != nil {
				p.Draw(canvases[r][c])
			}
		}
	}

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("benchreport: write png: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("benchreport: write png: %w", cerr)
		}
	}()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		return fmt.Errorf("benchreport: write png: %w", err)
	}
	return nil
}

// gridColumns returns how many of n panels WritePNG puts in one row.
func gridColumns(n int) int {
	switch {
	case n <= 3:
		return n
	case n == 4:
		return 2
	default:
		return 3
	}
}

// plot builds the gonum plot of c.
func (c Chart) plot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	p.Y.Label.Text = c.YLabel
	// Benchmark curves mostly rise to the right, so the top left is the
	// corner most often free for the legend.
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	p.Add(plotter.NewGrid())
	for i, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return nil, fmt.Errorf("series %q: %d x values but %d y values", s.Name, len(s.X), len(s.Y))
		}
		if len(s.X) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(s.X))
		for j := range xys {
			xys[j].X, xys[j].Y = s.X[j], s.Y[j]
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("series %q: %w", s.Name, err)
		}
		line.Color = plotutil.Color(i)
		points.Color = plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
	}
	if c.Target != nil {
		y := *c.Target
		if math.IsNaN(y) || math.IsInf(y, 0) {
			return nil, fmt.Errorf("target %v is not finite", y)
		}
		t := targetLine{Y: y, LineStyle: draw.LineStyle{
			Color:  color.RGBA{R: 200, A: 255},
			Width:  vg.Points(1.5),
			Dashes: []vg.Length{vg.Points(6), vg.Points(3)},
		}}
		p.Add(t)
		p.Legend.Add(fmt.Sprintf("target %g", y), t)
	}
	return p, nil
}

// targetLine is a horizontal line across the whole data area of a plot.
type targetLine struct {
	Y float64
	draw.LineStyle
}

// Plot implements plot.Plotter.
func (t targetLine) Plot(c draw.Canvas, p *plot.Plot) {
	_, trY := p.Transforms(&c)
	y := trY(t.Y)
	c.StrokeLine2(t.LineStyle, c.Min.X, y, c.Max.X, y)
}

// DataRange implements plot.DataRanger so the Y axis includes the target;
// the infinite X bounds leave the X axis to the series.
func (t targetLine) DataRange() (xmin, xmax, ymin, ymax float64) {
	return math.Inf(1), math.Inf(-1), t.Y, t.Y
}

// Thumbnail implements plot.Thumbnailer for the legend.
func (t targetLine) Thumbnail(c *draw.Canvas) {
	y := c.Center().Y
	c.StrokeLine2(t.LineStyle, c.Min.X, y, c.Max.X, y)
}
