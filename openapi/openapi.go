// Package openapi holds rill's API contract, openapi.yaml, and checks JSON
// documents and HTTP requests against it.
//
// The document is embedded in the binary, parsed once, and shared read-only:
// everything in this package is safe for concurrent use.
package openapi

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
)

//go:embed openapi.yaml
var spec []byte

// Spec returns the OpenAPI document as YAML. The caller must not modify it.
func Spec() []byte { return spec }

var load = sync.OnceValues(func() (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("parse openapi.yaml: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("validate openapi.yaml: %w", err)
	}
	return doc, nil
})

// Load returns the parsed and validated document. It is parsed on the first
// call; later calls return the same *openapi3.T, which callers must treat as
// read-only.
func Load() (*openapi3.T, error) { return load() }

// ValidateSchema validates the JSON document data against the component
// schema named component (for example "CreateChatCompletionStreamResponse").
// It returns a *FieldError when data breaks the schema, and another error
// when data is not JSON or the component does not exist.
func ValidateSchema(component string, data []byte) error {
	doc, err := Load()
	if err != nil {
		return err
	}
	ref, ok := doc.Components.Schemas[component]
	if !ok || ref.Value == nil {
		return fmt.Errorf("openapi: no component schema %q", component)
	}
	var value any
	if err := json.Unmarshal(data, &value); err != nil {
		return fmt.Errorf("openapi: %s document is not JSON: %w", component, err)
	}
	if err := ref.Value.VisitJSON(value, openapi3.MultiErrors()); err != nil {
		return fieldError(err)
	}
	return nil
}
