package toolcall

import "bytes"

// regionScan is what scanning a call region from its start found so far.
type regionScan struct {
	status scanStatus
	end    int // after the region (scanOK), or where scanning stopped
	calls  []callObject
	// Generic {"content": "..."}: the string body scanned so far.
	content                  bool
	contentStart, contentEnd int
}

func (p *Parser) scanRegion(start int) regionScan {
	switch p.format {
	case Hermes:
		return scanHermes(p.text, start, p.format.argKeys())
	case Llama3:
		return scanLlama(p.text, start, p.format.argKeys())
	case Mistral, MistralArgs:
		return scanMistral(p.text, start, p.format.argKeys())
	}
	if spec, ok := xmlSpecs[p.format]; ok {
		return p.scanXML(spec, start)
	}
	if spec, ok := namedSpecs[p.format]; ok {
		return p.scanNamed(spec, start)
	}
	if spec, ok := arraySpecs[p.format]; ok {
		return scanArrayRegion(spec, p.text, start)
	}
	return scanGeneric(p.text, start, p.format.argKeys())
}

// matchLiteral checks lit at b[i:]: scanOK when present, scanMore when b
// ends inside a prefix of it, scanBad otherwise.
func matchLiteral(b []byte, i int, lit string) scanStatus {
	rest := b[i:]
	if len(rest) >= len(lit) {
		if bytes.HasPrefix(rest, []byte(lit)) {
			return scanOK
		}
		return scanBad
	}
	if bytes.HasPrefix([]byte(lit), rest) {
		return scanMore
	}
	return scanBad
}

// scanHermes: <tool_call> ws {call} ws </tool_call>. A missing closing tag
// ends the region after the object.
func scanHermes(b []byte, start int, keys []string) regionScan {
	i := skipWS(b, start+len(hermesOpen))
	if i >= len(b) {
		return regionScan{status: scanMore, end: i}
	}
	if b[i] != '{' {
		return regionScan{status: scanBad, end: i}
	}
	co := scanCallObject(b, i, keys)
	sc := regionScan{calls: []callObject{co}, status: co.status, end: co.end}
	if co.status != scanOK {
		return sc
	}
	j := skipWS(b, co.end)
	switch matchLiteral(b, j, hermesClose) {
	case scanOK:
		sc.end = j + len(hermesClose)
	case scanMore:
		sc.status, sc.end = scanMore, len(b)
	}
	return sc
}

// scanLlama: (<|python_tag|>)? {call} (ws ;? ws {call})*.
func scanLlama(b []byte, start int, keys []string) regionScan {
	i := start
	if bytes.HasPrefix(b[i:], []byte(llamaPythonTag)) {
		i += len(llamaPythonTag)
	}
	var sc regionScan
	for {
		i = skipWS(b, i)
		if i >= len(b) {
			sc.status, sc.end = scanMore, i
			return sc
		}
		if b[i] != '{' {
			sc.status, sc.end = scanBad, i
			return sc
		}
		co := scanCallObject(b, i, keys)
		sc.calls = append(sc.calls, co)
		if co.status != scanOK {
			sc.status, sc.end = co.status, co.end
			return sc
		}
		j := skipWS(b, co.end)
		if j < len(b) && b[j] == ';' {
			j = skipWS(b, j+1)
		}
		switch {
		case j >= len(b):
			sc.status, sc.end = scanMore, len(b) // another call may follow
			return sc
		case b[j] != '{':
			sc.status, sc.end = scanOK, co.end
			return sc
		}
		i = j
	}
}

// scanMistral: [TOOL_CALLS] then either a JSON array of calls, or
// name([CALL_ID]id)?[ARGS]{...} repeated with further [TOOL_CALLS].
func scanMistral(b []byte, start int, keys []string) regionScan {
	i := skipWS(b, start+len(mistralCalls))
	if i >= len(b) {
		return regionScan{status: scanMore, end: i}
	}
	if b[i] == '[' {
		return scanMistralArray(b, i, keys)
	}
	var sc regionScan
	prevEnd := -1 // end of the last complete call
	for {
		co := scanMistralCall(b, i)
		sc.calls = append(sc.calls, co)
		if co.status != scanOK {
			sc.status, sc.end = co.status, co.end
			if co.status == scanBad && prevEnd >= 0 {
				// a later [TOOL_CALLS] that is no call: the region ends
				// before it
				sc.calls = sc.calls[:len(sc.calls)-1]
				sc.status, sc.end = scanOK, prevEnd
			}
			return sc
		}
		prevEnd = co.end
		j := skipWS(b, co.end)
		switch matchLiteral(b, j, mistralCalls) {
		case scanOK:
			i = j + len(mistralCalls)
		case scanMore:
			sc.status, sc.end = scanMore, len(b)
			return sc
		default:
			sc.status, sc.end = scanOK, co.end
			return sc
		}
	}
}

func isNameByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

// scanMistralCall scans name([CALL_ID]id)?[ARGS]value at b[i:].
func scanMistralCall(b []byte, i int) callObject {
	var co callObject
	fail := func(at int, st scanStatus) callObject {
		co.end, co.status = at, st
		return co
	}
	j := i
	for j < len(b) && isNameByte(b[j]) {
		j++
	}
	if j >= len(b) {
		return fail(j, scanMore)
	}
	if j == i || b[j] != '[' {
		return fail(j, scanBad)
	}
	name := string(b[i:j])
	if st := matchLiteral(b, j, mistralCallID); st != scanBad {
		if st == scanMore {
			return fail(len(b), scanMore)
		}
		k := j + len(mistralCallID)
		idStart := k
		for k < len(b) && isNameByte(b[k]) {
			k++
		}
		if k >= len(b) {
			return fail(k, scanMore)
		}
		co.id = string(b[idStart:k])
		j = k
	}
	switch matchLiteral(b, j, mistralArgs) {
	case scanMore:
		return fail(len(b), scanMore)
	case scanBad:
		return fail(j, scanBad)
	}
	co.name, co.nameOK = name, true
	k := skipWS(b, j+len(mistralArgs))
	if k >= len(b) {
		return fail(k, scanMore)
	}
	co.hasArgs, co.argsStart, co.argsIsValue = true, k, b[k] == '"'
	end, st := scanValue(b, k)
	co.argsEnd, co.argsDone = end, st == scanOK
	return fail(end, st)
}

// scanMistralArray: [ {call} (, {call})* ].
func scanMistralArray(b []byte, i int, keys []string) regionScan {
	var sc regionScan
	i = skipWS(b, i+1)
	for {
		if i >= len(b) {
			sc.status, sc.end = scanMore, i
			return sc
		}
		if b[i] != '{' {
			sc.status, sc.end = scanBad, i
			return sc
		}
		co := scanCallObject(b, i, keys)
		sc.calls = append(sc.calls, co)
		if co.status != scanOK {
			sc.status, sc.end = co.status, co.end
			return sc
		}
		j := skipWS(b, co.end)
		if j >= len(b) {
			sc.status, sc.end = scanMore, j
			return sc
		}
		switch b[j] {
		case ',':
			i = skipWS(b, j+1)
		case ']':
			sc.status, sc.end = scanOK, j+1
			return sc
		default:
			sc.status, sc.end = scanBad, j
			return sc
		}
	}
}

// scanGeneric: {"tool_calls": [ {call}, ... ]} or {"content": "..."}.
func scanGeneric(b []byte, start int, keys []string) regionScan {
	var sc regionScan
	fail := func(at int, st scanStatus) regionScan {
		sc.status, sc.end = st, at
		return sc
	}
	i := skipWS(b, start+1)
	if i >= len(b) {
		return fail(i, scanMore)
	}
	if b[i] != '"' {
		return fail(i, scanBad)
	}
	keyStart := i
	i, st := scanString(b, i)
	if st != scanOK {
		return fail(i, st)
	}
	key, _ := decodeString(b[keyStart:i])
	if i = skipWS(b, i); i >= len(b) {
		return fail(i, scanMore)
	}
	if b[i] != ':' {
		return fail(i, scanBad)
	}
	if i = skipWS(b, i+1); i >= len(b) {
		return fail(i, scanMore)
	}
	switch key {
	case "content":
		if b[i] != '"' {
			return fail(i, scanBad)
		}
		end, st := scanString(b, i)
		sc.content, sc.contentStart, sc.contentEnd = true, i+1, end
		if st == scanOK {
			sc.contentEnd = end - 1
		}
		if st != scanOK {
			return fail(end, st)
		}
		i = end
	case "tool_calls":
		if b[i] != '[' {
			return fail(i, scanBad)
		}
		arr := scanMistralArray(b, i, keys)
		sc.calls = arr.calls
		if arr.status != scanOK {
			return fail(arr.end, arr.status)
		}
		i = arr.end
	default:
		return fail(keyStart, scanBad)
	}
	if i = skipWS(b, i); i >= len(b) {
		return fail(i, scanMore)
	}
	if b[i] != '}' {
		return fail(i, scanBad)
	}
	return fail(i+1, scanOK)
}
