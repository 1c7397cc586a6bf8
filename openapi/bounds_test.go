package openapi

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestBounds: bodies beyond the value, depth, maxItems and maxProperties
// bounds are refused with OpenAI-style errors naming the field; bodies
// just within them pass.
func TestBounds(t *testing.T) {
	t.Parallel()
	v, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	const chat, comp = "/v1/chat/completions", "/v1/completions"
	const user = `"messages":[{"role":"user","content":"hi"}]`
	list := func(item string, n int) string {
		return "[" + strings.TrimSuffix(strings.Repeat(item+",", n), ",") + "]"
	}
	nest := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	tests := []struct {
		name, path, body string
		param, code      string // both empty: valid
	}{
		{"128 tools", chat, `{"model":"m",` + user + `,"tools":` + list(`{"type":"function","function":{"name":"f"}}`, 128) + `}`, "", ""},
		{"129 tools", chat, `{"model":"m",` + user + `,"tools":` + list(`{}`, 129) + `}`, "tools", "array_above_max_length"},
		{"129 functions", chat, `{"model":"m",` + user + `,"functions":` + list(`{}`, 129) + `}`, "functions", "array_above_max_length"},
		{"5 stops", chat, `{"model":"m",` + user + `,"stop":` + list(`"x"`, 5) + `}`, "stop", "array_above_max_length"},
		{"16 metadata keys", chat, `{"model":"m",` + user + `,"metadata":{` + strings.TrimSuffix(strings.Repeat(`"k":"v",`, 16), ",") + `}}`, "", ""},
		{"17 metadata keys", chat, `{"model":"m",` + user + `,"metadata":{` + strings.TrimSuffix(strings.Repeat(`"k":"v",`, 17), ",") + `}}`, "metadata", "object_above_max_properties"},
		{"2048 prompts", comp, `{"model":"m","prompt":` + list(`"p"`, 2048) + `}`, "", ""},
		{"2049 prompts", comp, `{"model":"m","prompt":` + list(`"p"`, 2049) + `}`, "prompt", "array_above_max_length"},
		{"2049 token prompts", comp, `{"model":"m","prompt":` + list(`[1]`, 2049) + `}`, "prompt", "array_above_max_length"},
		{"a long token prompt", comp, `{"model":"m","prompt":` + list(`1`, 100000) + `}`, "", ""},
		{"too many values", comp, `{"model":"m","prompt":` + list(`1`, MaxValues) + `}`, "", "too_many_values"},
		{"too many values in a tool", chat, `{"model":"m",` + user + `,"tools":[{"x":` + list(`{}`, MaxValues) + `}]}`, "", "too_many_values"},
		{"deep, within the limit", chat, `{"model":"m",` + user + `,"tools":[{"type":"function","function":{"name":"f","parameters":` + nest(MaxDepth-5) + `}}]}`, "", ""},
		{"too deep", chat, `{"model":"m",` + user + `,"tools":[` + nest(MaxDepth) + `]}`, "tools[0]" + strings.Repeat(".a", MaxDepth-2), "too_deep"},
		{"too many parts, nested", chat, `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":` +
			list(`{"type":"text","text":"a"}`, 3) + `}],"stop":{"x":1}}`, "stop", "invalid_type"},
		{"escaped key", chat, `{"model":"m",` + user + `,"t\u006fols":` + list(`{}`, 129) + `}`, "tools", "array_above_max_length"},
		{"spaces everywhere", chat, " { \"model\" : \"m\" ,\n\t\"messages\" : [ { \"role\" : \"user\" , \"content\" : \"hi\" } ] , \"tools\" : [ { \"type\" : \"function\" , \"function\" : { \"name\" : \"f\" } } ] } ", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := v.ValidateBody(context.Background(), "POST", tt.path, []byte(tt.body))
			if tt.code == "" {
				if err != nil {
					t.Fatalf("valid body refused: %v", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got %v, want a FieldError", err)
			}
			if fe.Param != tt.param || fe.Code != tt.code {
				t.Errorf("got param %q code %q (%s), want %q %q", fe.Param, fe.Code, fe.Message, tt.param, tt.code)
			}
			if len(fe.Message) > 300 {
				t.Errorf("message of %d bytes", len(fe.Message))
			}
		})
	}
}

// TestBoundsMessage: the maxItems error counts the whole array, like the
// validator's own.
func TestBoundsMessage(t *testing.T) {
	t.Parallel()
	v, err := NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[` +
		strings.TrimSuffix(strings.Repeat(`{"a":[1,{"b":"],"}]},`, 200), ",") + `]}`
	err = v.ValidateBody(context.Background(), "POST", "/v1/chat/completions", []byte(body))
	want := "Invalid 'tools': array too long. Expected an array with maximum length 128, but got an array with length 200 instead."
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// hostileBody returns a body of about size bytes made of one kind of small
// item: the cheapest way to make a JSON decoder allocate.
func hostileBody(kind string, size int) (path, body string) {
	const chat, comp = "/v1/chat/completions", "/v1/completions"
	const user = `"messages":[{"role":"user","content":"hi"}]`
	many := func(item string, n int) string { return strings.Repeat(item+",", n) + item }
	switch kind {
	case "tools": // the hardening report's body: ignored tools: [{}, …]
		return chat, `{"model":"m",` + user + `,"tools":[` + many("{}", size/3) + `]}`
	case "tool-nested": // the same inside one free-form tool
		return chat, `{"model":"m",` + user + `,"tools":[{"x":[` + many("{}", size/3) + `]}]}`
	case "token-ids": // one prompt of token ids, which no maxItems bounds
		return comp, `{"model":"m","prompt":[` + many("1", size/2) + `]}`
	case "messages":
		return chat, `{"model":"m","messages":[` + many(`{"role":"user","content":"a"}`, size/30) + `]}`
	case "text": // one long string: the plain case
		return chat, `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", size) + `"}]}`
	}
	panic(kind)
}

// BenchmarkValidateHostile measures what validating a 16 MiB body of tiny
// items costs (time and bytes per body). Before the bounds, the "tools"
// body took seconds and close to a GiB; now the bounds refuse it after a
// scan. -benchtime=1x is enough: one op is one whole body.
func BenchmarkValidateHostile(b *testing.B) {
	v, err := NewValidator()
	if err != nil {
		b.Fatal(err)
	}
	for _, kind := range []string{"tools", "tool-nested", "token-ids", "messages", "text"} {
		path, text := hostileBody(kind, 16<<20-200)
		body := []byte(text)
		b.Run(kind, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			var verdict error
			for b.Loop() {
				verdict = v.ValidateBody(context.Background(), "POST", path, body)
			}
			if verdict != nil {
				b.Logf("%s: %.60s", kind, verdict)
			}
		})
	}
	// The most a body within the bounds can hold: MaxValues tiny items,
	// all decoded and validated.
	path, text := hostileBody("token-ids", 2*(MaxValues-10))
	body := []byte(text)
	b.Run("token-ids-at-MaxValues", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if err := v.ValidateBody(context.Background(), "POST", path, body); err != nil {
				b.Fatal(err)
			}
		}
	})
	path, text = hostileBody("tool-nested", 3*(MaxValues-10))
	body = []byte(text)
	b.Run("tool-nested-at-MaxValues", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if err := v.ValidateBody(context.Background(), "POST", path, body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzValidateBody feeds bodies to the validator: it answers nil or a
// *FieldError, never panics, and never accepts a body beyond the bounds.
func FuzzValidateBody(f *testing.F) {
	f.Add(false, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{}],"metadata":{"a":"b"}}`))
	f.Add(true, []byte(`{"model":"m","prompt":[[1,2],[3]],"n":3}`))
	f.Add(true, []byte(`{"model":"m","prompt":"x","stop":["a","b"],"logit_bias":{"1":2}}`))
	v, err := NewValidator()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, completions bool, body []byte) {
		path := "/v1/chat/completions"
		if completions {
			path = "/v1/completions"
		}
		err := v.ValidateBody(context.Background(), "POST", path, body)
		if err == nil {
			return
		}
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Fatalf("not a FieldError: %v", err)
		}
		if fe.Message == "" || len(fe.Param) > maxParamBytes+len("…") {
			t.Fatalf("error %+v", fe)
		}
	})
}
