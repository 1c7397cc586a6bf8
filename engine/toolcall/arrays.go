package toolcall

// arraySpec describes a format that writes its calls as a JSON array of
// call objects after a marker: open [ {call}, ... ] close.
type arraySpec struct {
	open, close string // close "" when the array ends the calls
	nameKeys    []string
	argKeys     []string
}

var arraySpecs = map[Format]*arraySpec{
	CommandR7B: {open: "<|START_ACTION|>", close: "<|END_ACTION|>", nameKeys: []string{"tool_name", "name"}, argKeys: []string{"parameters", "arguments"}},
	Granite:    {open: "<|tool_call|>", nameKeys: []string{"name"}, argKeys: []string{"arguments", "parameters"}},
	// Firefunction writes " functools[...]"; the space before it is
	// dropped as any whitespace before a call.
	Firefunction: {open: "functools", nameKeys: []string{"name"}, argKeys: []string{"arguments", "parameters"}},
}

// scanArrayRegion scans open [ {call} (, {call})* ] close from start.
func scanArrayRegion(spec *arraySpec, b []byte, start int) regionScan {
	i := skipWS(b, start+len(spec.open))
	if i >= len(b) {
		return regionScan{status: scanMore, end: i}
	}
	if b[i] != '[' {
		return regionScan{status: scanBad, end: i}
	}
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
		co := scanCallObjectKeys(b, i, spec.nameKeys, spec.argKeys)
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
			continue
		case ']':
		default:
			sc.status, sc.end = scanBad, j
			return sc
		}
		sc.status, sc.end = scanOK, j+1
		if spec.close != "" {
			k := skipWS(b, j+1)
			switch matchLiteral(b, k, spec.close) {
			case scanOK:
				sc.end = k + len(spec.close)
			case scanMore:
				sc.status, sc.end = scanMore, len(b)
			}
		}
		return sc
	}
}
