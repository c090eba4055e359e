package inflight

import (
	"context"
	"errors"
	"testing"
)

func TestCounter(t *testing.T) {
	var c Counter
	if err := c.Wait(t.Context()); err != nil {
		t.Fatalf("Wait with nothing in progress: %v", err)
	}
	c.Add()
	c.Add()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with work in progress and an ended ctx: %v", err)
	}
	c.Done()
	if err := c.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with one piece left: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait(t.Context()) }()
	c.Done()
	if err := <-done; err != nil {
		t.Fatalf("Wait after the last Done: %v", err)
	}
	// Counting starts again after an idle moment.
	c.Add()
	if err := c.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait after a new Add: %v", err)
	}
	c.Done()
	var nilCounter *Counter
	nilCounter.Add()
	nilCounter.Done()
}
