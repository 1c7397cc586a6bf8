package router

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"rill/engine"
)

// fake serves the models it is given and answers with a stream that ends
// at once; it counts requests and Close calls.
type fake struct {
	models   []engine.ModelCard
	requests int
	closed   int
	closeErr error
}

func (f *fake) Models() []engine.ModelCard { return f.models }

func (f *fake) Generate(ctx context.Context, req *engine.Request) (engine.Stream, error) {
	f.requests++
	return eof{}, nil
}

type eof struct{}

func (eof) TryRecv() (engine.Event, bool, error) { return engine.Event{}, false, io.EOF }

func (eof) Ready() <-chan struct{} { return readyNow }

var readyNow = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// closer is a fake with a Close method.
type closer struct{ *fake }

func (c closer) Close() error {
	c.closed++
	return c.closeErr
}

func models(ids ...string) []engine.ModelCard {
	out := make([]engine.ModelCard, len(ids))
	for i, id := range ids {
		out[i] = engine.ModelCard{ID: id}
	}
	return out
}

func TestNew(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		engines []engine.Engine
		want    string // error text; "" for success
	}{
		{"one", []engine.Engine{&fake{models: models("a")}}, ""},
		{"several", []engine.Engine{&fake{models: models("a", "b")}, &fake{models: models("c")}}, ""},
		{"none", nil, "no engines"},
		{"nil engine", []engine.Engine{nil}, "is nil"},
		{"no models", []engine.Engine{&fake{}}, "serves no model"},
		{"empty id", []engine.Engine{&fake{models: models("")}}, "without an id"},
		{"duplicate across engines", []engine.Engine{&fake{models: models("a")}, &fake{models: models("b", "a")}}, `"a" is served twice`},
	}
	for _, tc := range cases {
		_, err := New(tc.engines...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestRoute(t *testing.T) {
	t.Parallel()
	a, b := &fake{models: models("a1", "a2")}, &fake{models: models("b")}
	r, err := New(a, b)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range r.Models() {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "a1,a2,b" {
		t.Errorf("models %v", ids)
	}
	r.Models()[0].ID = "changed"
	if r.Models()[0].ID != "a1" {
		t.Error("Models shares its slice with the caller")
	}
	for _, id := range []string{"a2", "b", "b", "a1"} {
		if _, err := r.Generate(context.Background(), &engine.Request{Model: id}); err != nil {
			t.Fatal(err)
		}
	}
	if a.requests != 2 || b.requests != 2 {
		t.Errorf("requests a=%d b=%d, want 2 each", a.requests, b.requests)
	}
	if _, err := r.Generate(context.Background(), &engine.Request{Model: "c"}); !errors.Is(err, engine.ErrUnknownModel) {
		t.Errorf("unknown model: %v", err)
	}
	if r.Engine("b") != b || r.Engine("c") != nil {
		t.Error("Engine lookup")
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	a := closer{&fake{models: models("a"), closeErr: boom}}
	b := &fake{models: models("b")} // no Close method
	c := closer{&fake{models: models("c")}}
	r, err := New(a, b, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); !errors.Is(err, boom) || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("Close: %v", err)
	}
	if err := r.Close(); !errors.Is(err, boom) {
		t.Errorf("second Close: %v", err)
	}
	if a.closed != 1 || c.closed != 1 {
		t.Errorf("closed a=%d c=%d, want once each", a.closed, c.closed)
	}
}
