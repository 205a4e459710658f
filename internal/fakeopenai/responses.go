package fakeopenai

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// responsesParams are the request parameters of the Responses API.
var responsesParams = []string{
	"background", "context_management", "conversation", "include", "input",
	"instructions", "max_output_tokens", "max_tool_calls", "metadata", "model",
	"parallel_tool_calls", "previous_response_id", "prompt", "prompt_cache_key",
	"prompt_cache_retention", "reasoning", "safety_identifier", "service_tier",
	"store", "stream", "stream_options", "temperature", "text", "tool_choice",
	"tools", "top_logprobs", "top_p", "truncation", "user",
}

type responsesRequest struct {
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Tools              []responsesTool `json:"tools"`
	Store              *bool           `json:"store"`
	Stream             bool            `json:"stream"`
	PreviousResponseID string          `json:"previous_response_id"`
	Conversation       json.RawMessage `json:"conversation"`
	MaxOutputTokens    int64           `json:"max_output_tokens"`
}

type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
}

type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ID        string          `json:"id"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments *string         `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

// decodeResponses decodes and checks a Responses API request.
func decodeResponses(body []byte) (Call, *HTTPError) {
	if herr := checkParams(body, responsesParams); herr != nil {
		return Call{}, herr
	}
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return Call{}, invalidRequest("", "", "Invalid request body: %v", err)
	}
	switch {
	case req.Model == "":
		return Call{}, invalidRequest("model", "missing_required_parameter", "Missing required parameter: 'model'.")
	case req.PreviousResponseID != "":
		// Nothing is stored here, as with store=false.
		return Call{}, invalidRequest("previous_response_id", "previous_response_not_found", "Previous response with id '%s' not found.", req.PreviousResponseID)
	case len(req.Conversation) > 0 && string(req.Conversation) != "null":
		return Call{}, invalidRequest("conversation", "unsupported_value", "This fake server keeps no conversations; send the full input.")
	}
	if _, herr := decodeStreamOptions(body, req.Stream, responsesStreamKeys); herr != nil {
		return Call{}, herr
	}
	call := Call{API: APIResponses, Model: req.Model, MaxOutputTokens: req.MaxOutputTokens, Stream: req.Stream}
	if req.Instructions != nil && *req.Instructions != "" {
		call.Messages = append(call.Messages, Message{Role: "system", Content: *req.Instructions})
	}

	var text string
	var items []responsesItem
	switch {
	case len(req.Input) == 0 || string(req.Input) == "null":
		return Call{}, invalidRequest("input", "missing_required_parameter", "Missing required parameter: 'input'.")
	case json.Unmarshal(req.Input, &text) == nil:
		if text == "" {
			return Call{}, invalidRequest("input", "empty_string", "Invalid 'input': empty string. Expected a string with minimum length 1.")
		}
		call.Messages = append(call.Messages, Message{Role: "user", Content: text})
	case json.Unmarshal(req.Input, &items) == nil:
		if len(items) == 0 {
			return Call{}, invalidRequest("input", "empty_array", "Invalid 'input': empty array. Expected an array with minimum length 1, but got an empty array instead.")
		}
		msgs, herr := foldItems(items)
		if herr != nil {
			return Call{}, herr
		}
		call.Messages = append(call.Messages, msgs...)
	default:
		return Call{}, invalidRequest("input", "invalid_type", "Invalid type for 'input': expected one of a string or array of input items, but got %s instead.", jsonKind(req.Input))
	}

	for i, t := range req.Tools {
		where := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			continue // built-in tools (web_search, ...) are not the agent's
		}
		// Function tools are strict unless strict is false.
		strict := t.Strict == nil || *t.Strict
		if herr := checkTool(where, t.Name, t.Parameters, strict, call.Tools); herr != nil {
			return Call{}, herr
		}
		call.Tools = append(call.Tools, t.Name)
	}
	return call, nil
}

// foldItems checks input items and folds them into messages.
func foldItems(items []responsesItem) ([]Message, *HTTPError) {
	var msgs []Message
	calls := map[string]bool{} // call_id -> answered
	var order []string         // call_ids in order
	inAssistant := false       // the last item was an assistant message or a function_call
	for i, it := range items {
		where := fmt.Sprintf("input[%d]", i)
		typ := it.Type
		if typ == "" && it.Role != "" {
			typ = "message"
		}
		switch typ {
		case "message":
			var parts []string
			switch it.Role {
			case "user", "system", "developer":
				parts = []string{"input_text", "input_image", "input_file"}
			case "assistant":
				parts = []string{"output_text", "refusal", "input_text"}
			default:
				return nil, invalidRequest(where+".role", "invalid_value",
					"Invalid value: '%s'. Supported values are: 'assistant', 'system', 'developer', and 'user'.", it.Role)
			}
			content, present, herr := responsesContent(it.Content, where+".content", parts...)
			if herr != nil {
				return nil, herr
			}
			if !present {
				return nil, invalidRequest(where+".content", "missing_required_parameter", "Missing required parameter: '%s.content'.", where)
			}
			msgs = append(msgs, Message{Role: it.Role, Content: content})
			inAssistant = it.Role == "assistant"
		case "function_call":
			switch {
			case it.CallID == "":
				return nil, invalidRequest(where+".call_id", "missing_required_parameter", "Missing required parameter: '%s.call_id'.", where)
			case it.Name == "":
				return nil, invalidRequest(where+".name", "missing_required_parameter", "Missing required parameter: '%s.name'.", where)
			case it.Arguments == nil:
				return nil, invalidRequest(where+".arguments", "missing_required_parameter", "Missing required parameter: '%s.arguments'.", where)
			}
			if _, dup := calls[it.CallID]; dup {
				return nil, invalidRequest(where+".call_id", "duplicate_value", "Duplicate function call with call_id %s.", it.CallID)
			}
			calls[it.CallID] = false
			order = append(order, it.CallID)
			tc := ToolCall{ID: it.CallID, Name: it.Name, Arguments: *it.Arguments}
			if inAssistant {
				last := &msgs[len(msgs)-1]
				last.ToolCalls = append(last.ToolCalls, tc)
			} else {
				msgs = append(msgs, Message{Role: "assistant", ToolCalls: []ToolCall{tc}})
			}
			inAssistant = true
		case "function_call_output":
			if it.CallID == "" {
				return nil, invalidRequest(where+".call_id", "missing_required_parameter", "Missing required parameter: '%s.call_id'.", where)
			}
			answered, ok := calls[it.CallID]
			if !ok || answered {
				return nil, invalidRequest("input", "", "No tool call found for function call output with call_id %s.", it.CallID)
			}
			calls[it.CallID] = true
			output, present, herr := responsesContent(it.Output, where+".output", "input_text", "input_image", "input_file")
			if herr != nil {
				return nil, herr
			}
			if !present {
				return nil, invalidRequest(where+".output", "missing_required_parameter", "Missing required parameter: '%s.output'.", where)
			}
			msgs = append(msgs, Message{Role: "tool", Content: output, ToolCallID: it.CallID})
			inAssistant = false
		case "reasoning":
			// Carries no conversation text; a reasoning model's business.
		case "item_reference":
			return nil, invalidRequest(where+".id", "", "Item with id '%s' not found.", it.ID)
		default:
			return nil, invalidRequest(where+".type", "invalid_value", "Invalid value: '%s'. Supported values are: 'message', 'function_call', 'function_call_output', 'reasoning' and 'item_reference'.", typ)
		}
	}
	for _, id := range order {
		if !calls[id] {
			return nil, invalidRequest("input", "", "No tool output found for function call %s.", id)
		}
	}
	return msgs, nil
}

// responsesContent decodes a message content or a function call output: a
// string or an array of parts of the given types, whose text parts are
// joined.
func responsesContent(raw json.RawMessage, where string, partTypes ...string) (text string, present bool, herr *HTTPError) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	if err := json.Unmarshal(raw, &text); err == nil {
		return text, true, nil
	}
	var parts []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", false, invalidRequest(where, "invalid_type", "Invalid type for '%s': expected one of a string or array of objects, but got %s instead.", where, jsonKind(raw))
	}
	var b strings.Builder
	for j, p := range parts {
		if !slices.Contains(partTypes, p.Type) {
			return "", false, invalidRequest(fmt.Sprintf("%s[%d].type", where, j), "invalid_value",
				"Invalid value: '%s'. Supported values are: '%s'.", p.Type, strings.Join(partTypes, "', '"))
		}
		switch p.Type {
		case "input_text", "output_text":
			b.WriteString(p.Text)
		case "refusal":
			b.WriteString(p.Refusal)
		}
	}
	return b.String(), true, nil
}

// response renders reply as a response object. body is the request, whose
// settings a response echoes.
func (s *Server) response(call Call, reply Reply, body []byte) map[string]any {
	var echo struct {
		Instructions    *string           `json:"instructions"`
		Store           *bool             `json:"store"`
		Tools           []json.RawMessage `json:"tools"`
		MaxOutputTokens *int64            `json:"max_output_tokens"`
	}
	_ = json.Unmarshal(body, &echo) // decoded before
	store := echo.Store == nil || *echo.Store
	tools := echo.Tools
	if tools == nil {
		tools = []json.RawMessage{}
	}

	status, incomplete := "completed", any(nil)
	if reply.Truncated {
		status, incomplete = "incomplete", map[string]any{"reason": "max_output_tokens"}
	}

	output := []any{}
	if reply.Text != "" || len(reply.ToolCalls) == 0 {
		output = append(output, map[string]any{
			"type":   "message",
			"id":     newID("msg_"),
			"status": status,
			"role":   "assistant",
			"content": []any{map[string]any{
				"type":        "output_text",
				"text":        reply.Text,
				"annotations": []any{},
				"logprobs":    []any{},
			}},
		})
	}
	for _, tc := range reply.ToolCalls {
		args, _ := tc.marshalArguments() // checked by checkReply
		output = append(output, map[string]any{
			"type":      "function_call",
			"id":        newID("fc_"),
			"call_id":   s.toolCallID(),
			"name":      tc.Name,
			"arguments": string(args),
			"status":    "completed",
		})
	}
	in, out := usage(call, reply)
	now := time.Now().Unix()
	return map[string]any{
		"id":                   newID("resp_"),
		"object":               "response",
		"created_at":           now,
		"completed_at":         now,
		"status":               status,
		"background":           false,
		"error":                nil,
		"incomplete_details":   incomplete,
		"instructions":         echo.Instructions,
		"max_output_tokens":    echo.MaxOutputTokens,
		"max_tool_calls":       nil,
		"model":                call.Model,
		"output":               output,
		"parallel_tool_calls":  true,
		"previous_response_id": nil,
		"reasoning":            map[string]any{"effort": nil, "summary": nil},
		"service_tier":         "default",
		"store":                store,
		"temperature":          1.0,
		"text":                 map[string]any{"format": map[string]any{"type": "text"}, "verbosity": "medium"},
		"tool_choice":          "auto",
		"tools":                tools,
		"top_logprobs":         0,
		"top_p":                1.0,
		"truncation":           "disabled",
		"usage": map[string]any{
			"input_tokens":          in,
			"input_tokens_details":  map[string]any{"cached_tokens": 0},
			"output_tokens":         out,
			"output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens":          in + out,
		},
		"user":     nil,
		"metadata": map[string]any{},
	}
}
