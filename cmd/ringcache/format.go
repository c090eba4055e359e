package main

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"time"
)

// Formatting shared by the commands' text and JSON output.

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// since is a duration for humans: 1.2s, 340ms, 85µs.
func since(d time.Duration) string {
	switch {
	case d >= time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + "s"
	case d >= time.Millisecond:
		return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + "ms"
	}
	return strconv.FormatFloat(float64(d)/1e3, 'f', 0, 64) + "µs"
}

// writeOut writes s to w; a failed write to stdout is a failure of the
// command (a closed pipe, a full disk).
// printResult prints a read command's result, as JSON or as text (a function,
// so that text is only formatted when asked for), then reports the nodes
// that could not be read (failed).
func printResult(ctx context.Context, o *options, env environ, v any, text func() string, errs []error) error {
	var err error
	if o.json() {
		err = writeJSON(env.Stdout, v)
	} else {
		err = writeOut(env.Stdout, text())
	}
	if err != nil {
		return err
	}
	return failed(ctx, env.Stderr, errs...)
}

func writeOut(w io.Writer, s string) error {
	_, err := io.WriteString(w, s)
	return err
}

// percent is n/d as a percentage, "-" when d is 0.
func percent(n, d int64) string {
	if d <= 0 {
		return "-"
	}
	return strconv.FormatFloat(100*ratio(n, d), 'f', 1, 64) + "%"
}

// bytesIEC writes n with a binary unit: 512B, 3.2KiB, 64.0MiB.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + "B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return strconv.FormatFloat(float64(n)/float64(div), 'f', 1, 64) + string("KMGTP"[exp]) + "iB"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func percentF(f float64, ok bool) string {
	if !ok {
		return "-"
	}
	return strconv.FormatFloat(100*f, 'f', 1, 64) + "%"
}
