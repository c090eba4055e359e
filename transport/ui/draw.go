package ui

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The ring's geometry in the SVG's user units: a circle of ringRadius
// around the origin, in a square viewBox of side 2*viewHalf.
const (
	ringRadius = 90
	viewHalf   = 110
	circle     = 1 << 32
)

var radius = strconv.Itoa(ringRadius)

// palette gives members distinct colours in the order of their URLs, which
// every node shares, so a member has one colour on every node's page. Past
// its end, hues are spread by the golden angle.
var palette = []string{
	"#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1", "#edc948",
	"#76b7b2", "#ff9da7", "#9c755f", "#17becf", "#bcbd22", "#7f7f7f",
}

func color(i int) string {
	if i < len(palette) {
		return palette[i]
	}
	h := math.Mod(float64(i)*137.508, 360)
	return hslHex(h, 0.55, 0.5)
}

// hslHex converts a hue in degrees, saturation and lightness to #rrggbb.
func hslHex(h, s, l float64) string {
	c := (1 - math.Abs(2*l-1)) * s
	x := c * (1 - math.Abs(math.Mod(h/60, 2)-1))
	m := l - c/2
	var r, g, b float64
	switch {
	case h < 60:
		r, g = c, x
	case h < 120:
		r, g = x, c
	case h < 180:
		g, b = c, x
	case h < 240:
		g, b = x, c
	case h < 300:
		r, b = x, c
	default:
		r, b = c, x
	}
	v := func(f float64) int { return int(math.Round((f + m) * 255)) }
	return fmt.Sprintf("#%02x%02x%02x", v(r), v(g), v(b))
}

// point returns where hash h sits on a circle of radius r: hash 0 at the
// top, growing clockwise, as a clock reads.
func point(h uint64, r float64) (x, y float64) {
	a := 2 * math.Pi * float64(h) / circle
	return r * math.Sin(a), -r * math.Cos(a)
}

// arcsPath returns one SVG path (a "d" attribute) that strokes every arc
// of arcs, each a pair of start and size, along the ring.
func arcsPath(arcs [][2]uint64) string {
	var b strings.Builder
	for _, a := range arcs {
		start, size := a[0], a[1]
		if size >= circle {
			// A path cannot draw a full circle as one arc: two halves.
			arc(&b, start, circle/2)
			arc(&b, start+circle/2, circle/2)
			continue
		}
		arc(&b, start, size)
	}
	return b.String()
}

func arc(b *strings.Builder, start, size uint64) {
	x0, y0 := point(start, ringRadius)
	x1, y1 := point(start+size, ringRadius)
	large := 0
	if size > circle/2 {
		large = 1
	}
	b.WriteString("M")
	num(b, x0)
	b.WriteByte(' ')
	num(b, y0)
	b.WriteString("A" + radius + " " + radius + " 0 ")
	b.WriteString(strconv.Itoa(large))
	b.WriteString(" 1 ")
	num(b, x1)
	b.WriteByte(' ')
	num(b, y1)
}

// num writes f with two decimals: a hundredth of a unit is far below a
// pixel, and the path stays short.
func num(b *strings.Builder, f float64) {
	b.WriteString(strconv.FormatFloat(f, 'f', 2, 64))
}

// decorate fills in what the page draws: each member's colour and path,
// and the key's mark.
func decorate(s *Snapshot) {
	for i := range s.Members {
		m := &s.Members[i]
		m.Color = color(i)
		m.Path = arcsPath(m.Arcs)
	}
	s.Agreement.Text = agreementText(s.Agreement)
	s.Palette = palette
	if s.Key != nil {
		s.Key.Angle = 360 * float64(s.Key.Hash) / circle
	}
}
