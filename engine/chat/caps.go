package chat

import (
	"strings"
	"unsafe"
)

// Caps are what a template does with the parts of a conversation. They are
// found as llama.cpp's server finds them (its Jinja engine's capability
// check): the template renders small probe conversations while the
// interpreter notes which of their values the template uses, and a part
// the template never uses is a part it does not support. llama.cpp then
// reshapes every conversation to fit (see Adapt), so that, for instance, a
// system message is folded into the first user turn of a template that
// ignores the system role instead of vanishing.
//
// "Uses" means what llama.cpp counts, value by value: a value is used when
// it is looked up (message.content, message['content']), named by a
// variable (one set from message.get('content'), a macro's parameter, a
// loop variable), given to a filter or method, iterated, or inside a value
// serialised whole (tojson, string). Printing message.get('content') at
// once does not count, as it does not in llama.cpp. Content is used as a
// list of parts when it is iterated, indexed by a number or filtered with
// selectattr.
type Caps struct {
	// SystemRole: the template uses the content of a leading system
	// message.
	SystemRole bool
	// StringContent: the template renders content given as a string;
	// TypedContent: it uses content as a list of parts
	// ([{"type": "text", "text": ...}]). llama.cpp gives a template that
	// has only one of them content in that shape.
	StringContent, TypedContent bool
	// Tools: the template uses the names of the tools it is given.
	Tools bool
	// ToolCalls: the template uses an assistant turn's tool_calls;
	// ParallelToolCalls: it uses the second of two calls as well.
	ToolCalls, ParallelToolCalls bool
	// ObjectArguments: the template uses a tool call's arguments as an
	// object (the value of a key, or the whole with tojson); without it
	// llama.cpp passes the arguments as the JSON text the client sent.
	ObjectArguments bool
}

// The probes' values, as llama.cpp's capability check writes them.
const (
	probeContentMarker = "STRING_MARKER"
	probeTools         = `[{"name": "tool", "type": "function", "function": {"name": "tool1", "description": "Tool description",
		"parameters": {"type": "object", "properties": {"arg": {"type": "string", "description": "Arg description"}}, "required": ["arg"]}}}]`
	probeObjectArgs = `{"arg": "value"}`
	probeStringArgs = `"{\"arg\": \"value\"}"`
)

// probeToolChat is the probe conversation with tool calls: one call, or
// two when parallel, with args (a JSON object, or a JSON string holding
// the object's text).
func probeToolChat(args string, parallel bool) string {
	call := func(id string) string {
		return `{"id": "` + id + `", "type": "function", "function": {"name": "tool1", "arguments": ` + args + `}}`
	}
	calls := call("call00001")
	if parallel {
		calls += ", " + call("call00002")
	}
	return `[{"role": "user", "content": "User message"},
		{"role": "assistant", "content": "", "tool_calls": [` + calls + `]},
		{"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
		{"role": "assistant", "content": "The tool response was 'tool response'"},
		{"role": "user", "content": "User message"}]`
}

// Caps returns the template's capabilities, probed once by New.
func (t *Template) Caps() Caps { return t.caps }

// probeCaps runs llama.cpp's capability probes on t. Each asks whether
// one value of a probe conversation was used; probes that fail to render
// leave the defaults, as in llama.cpp, except where noted.
func (t *Template) probeCaps() Caps {
	c := Caps{SystemRole: true, StringContent: true, Tools: true, ToolCalls: true, ParallelToolCalls: true}

	// Content as a string: does the template use it as a list of parts?
	p := t.probe(`[{"role": "user", "content": "`+probeContentMarker+`"}]`, "")
	asList := p.use.asList[identity(p.at("messages", 0, "content"))]
	c.TypedContent = asList
	if !p.ok || asList && !strings.Contains(p.out, probeContentMarker) {
		c.StringContent = false
	}

	// A system message: is its content used at all?
	p = t.probe(`[{"role": "system", "content": "System message"}, {"role": "user", "content": "User message"}]`, "")
	c.SystemRole = p.used("messages", 0, "content")

	// One tool call with object arguments, then (unless those are used)
	// with the arguments as a JSON string; a template that renders
	// neither supports no tools.
	p = t.probe(probeToolChat(probeObjectArgs, false), probeTools)
	if p.ok {
		c.Tools = p.used("tools", 0, "function", "name")
		c.ToolCalls = p.used("messages", 1, "tool_calls")
		c.ObjectArguments = c.ToolCalls && p.used("messages", 1, "tool_calls", 0, "function", "arguments", "arg")
	}
	if !c.ObjectArguments {
		p = t.probe(probeToolChat(probeStringArgs, false), probeTools)
		if !p.ok {
			c.Tools, c.ToolCalls = false, false
		} else {
			c.Tools = c.Tools && p.used("tools", 0, "function", "name")
			c.ToolCalls = c.ToolCalls && p.used("messages", 1, "tool_calls")
		}
	}

	// Two calls: is the second one used?
	args := probeStringArgs
	if c.ObjectArguments {
		args = probeObjectArgs
	}
	p = t.probe(probeToolChat(args, true), probeTools)
	c.ParallelToolCalls = p.ok && p.used("messages", 1, "tool_calls", 1, "function")
	return c
}

// probeResult is one probe's render: its variables, what the template
// used of them, its output and whether it rendered.
type probeResult struct {
	vars map[string]value
	use  *reads
	out  string
	ok   bool
}

// at follows a path of keys and indexes from a variable; nil where it
// ends.
func (p probeResult) at(name string, path ...any) value {
	v := p.vars[name]
	for _, step := range path {
		switch k := step.(type) {
		case string:
			d, ok := v.(*dict)
			if !ok {
				return nil
			}
			v, _ = d.get(k)
		case int:
			l, ok := v.(*list)
			if !ok || k >= len(l.items) {
				return nil
			}
			v = l.items[k]
		}
	}
	return v
}

// used reports whether the value at the path was used.
func (p probeResult) used(name string, path ...any) bool {
	id := identity(p.at(name, path...))
	return id != nil && p.use.used[id]
}

// probe renders messages (JSON) as llama.cpp's capability check does:
// tools the given JSON or an empty list, bos_token and eos_token empty,
// add_generation_prompt true, nothing else set.
func (t *Template) probe(messages, tools string) probeResult {
	if tools == "" {
		tools = "[]"
	}
	mv, err1 := decodeJSON([]byte(messages))
	tv, err2 := decodeJSON([]byte(tools))
	if err1 != nil || err2 != nil {
		panic("chat: a capability probe is not valid JSON") // the probes are constants
	}
	p := probeResult{
		vars: map[string]value{"messages": mv, "tools": tv, "bos_token": "", "eos_token": "", "add_generation_prompt": true},
		use:  &reads{used: map[any]bool{}, asList: map[any]bool{}},
	}
	out, err := t.executeWith(p.vars, p.use)
	p.out, p.ok = out, err == nil
	return p
}

// reads is what a render used of its variables, for the capability
// probes, by value identity as llama.cpp marks its values: the same dict,
// list or string (the same bytes in memory: each string the probe's JSON
// decodes to is its own, and one passed around keeps its bytes), not an
// equal one. A string built from another (by a filter, a method, +) is a
// new value, unmarked.
type reads struct {
	used   map[any]bool // values used: looked up, named, filtered, iterated
	asList map[any]bool // strings used as lists: iterated, indexed by number, selectattr
}

// identity is v's identity: the pointer of a dict or list, the address of
// a non-empty string's bytes; nil for anything else.
func identity(v value) any {
	switch x := v.(type) {
	case *dict, *list:
		return x
	case string:
		if x != "" {
			return unsafe.StringData(x)
		}
	}
	return nil
}

// use marks v used.
func (u *reads) use(v value) {
	if id := identity(v); id != nil {
		u.used[id] = true
	}
}

// lookup notes that obj[k] (or obj.k) was looked up and gave v: both are
// used, and a string indexed by a number is used as a list.
func (u *reads) lookup(obj, k, v value) {
	u.use(obj)
	u.use(v)
	if _, isStr := obj.(string); isStr {
		if _, ok := intOf(k); ok {
			u.asList[identity(obj)] = true
		}
	}
}

// iterated notes that v was iterated.
func (u *reads) iterated(v value) {
	u.use(v)
	if _, isStr := v.(string); isStr {
		u.asList[identity(v)] = true
	}
}

// filtered notes that the filter name ran on v: selectattr uses a string
// as a list; tojson and string use all of a dict or list.
func (u *reads) filtered(name string, v value) {
	u.use(v)
	switch name {
	case "selectattr":
		if _, isStr := v.(string); isStr {
			u.asList[identity(v)] = true
		}
	case "tojson", "string":
		u.all(v, 0)
	}
}

// all marks v and everything within it used.
func (u *reads) all(v value, depth int) {
	if depth > maxValueDepth {
		return
	}
	u.use(v)
	switch x := v.(type) {
	case *dict:
		for i, k := range x.keys {
			u.use(k)
			u.all(x.vals[i], depth+1)
		}
	case *list:
		for _, it := range x.items {
			u.all(it, depth+1)
		}
	}
}
