package fakeopenai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
)

// chatParams are the request parameters of Chat Completions; anything else
// is refused, as OpenAI refuses it.
var chatParams = []string{
	"audio", "frequency_penalty", "function_call", "functions", "logit_bias",
	"logprobs", "max_completion_tokens", "max_tokens", "messages", "metadata",
	"modalities", "model", "n", "parallel_tool_calls", "prediction",
	"presence_penalty", "prompt_cache_key", "prompt_cache_retention",
	"reasoning_effort", "response_format", "safety_identifier", "seed",
	"service_tier", "stop", "store", "stream", "stream_options", "temperature",
	"tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity",
	"web_search_options",
}

type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	Tools               []chatTool    `json:"tools"`
	Stream              bool          `json:"stream"`
	MaxTokens           int64         `json:"max_tokens"`
	MaxCompletionTokens int64         `json:"max_completion_tokens"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []chatToolCall  `json:"tool_calls"`
	ToolCallID *string         `json:"tool_call_id"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

// decodeChat decodes and checks a Chat Completions request.
func decodeChat(body []byte) (Call, *HTTPError) {
	if herr := checkParams(body, chatParams); herr != nil {
		return Call{}, herr
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return Call{}, invalidRequest("", "", "Invalid request body: %v", err)
	}
	if req.Model == "" {
		return Call{}, invalidRequest("model", "", "you must provide a model parameter")
	}
	if _, herr := decodeStreamOptions(body, req.Stream, chatStreamKeys); herr != nil {
		return Call{}, herr
	}
	if len(req.Messages) == 0 {
		return Call{}, invalidRequest("messages", "empty_array", "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.")
	}
	call := Call{API: APIChat, Model: req.Model, MaxOutputTokens: req.MaxCompletionTokens, Stream: req.Stream}
	if call.MaxOutputTokens == 0 {
		call.MaxOutputTokens = req.MaxTokens
	}

	seen := map[string]bool{} // every tool call ID so far
	var pending []string      // calls of the last assistant message not yet answered
	for i, m := range req.Messages {
		where := fmt.Sprintf("messages[%d]", i)
		if len(pending) > 0 && m.Role != "tool" {
			return Call{}, invalidRequest(where+".role", "",
				"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(pending, ", "))
		}
		if len(m.ToolCalls) > 0 && m.Role != "assistant" {
			return Call{}, invalidRequest(where+".tool_calls", "", "Invalid parameter: 'tool_calls' is only allowed in messages with role 'assistant'.")
		}
		if m.ToolCallID != nil && m.Role != "tool" {
			return Call{}, invalidRequest(where+".tool_call_id", "", "Invalid parameter: 'tool_call_id' is only allowed in messages with role 'tool'.")
		}
		msg := Message{Role: m.Role}
		var (
			present bool
			herr    *HTTPError
		)
		switch m.Role {
		case "system", "developer", "tool":
			msg.Content, present, herr = chatContent(m.Content, where+".content", "text")
		case "user":
			msg.Content, present, herr = chatContent(m.Content, where+".content", "text", "image_url", "input_audio", "file")
		case "assistant":
			msg.Content, present, herr = chatContent(m.Content, where+".content", "text", "refusal")
		default:
			return Call{}, invalidRequest(where+".role", "invalid_value",
				"Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", m.Role)
		}
		if herr != nil {
			return Call{}, herr
		}
		if !present && !(m.Role == "assistant" && len(m.ToolCalls) > 0) {
			return Call{}, invalidRequest(where+".content", "missing_required_parameter", "Missing required parameter: '%s.content'.", where)
		}
		switch m.Role {
		case "assistant":
			for j, tc := range m.ToolCalls {
				w := fmt.Sprintf("%s.tool_calls[%d]", where, j)
				switch {
				case tc.ID == "":
					return Call{}, invalidRequest(w+".id", "missing_required_parameter", "Missing required parameter: '%s.id'.", w)
				case tc.Type != "function":
					return Call{}, invalidRequest(w+".type", "invalid_value", "Invalid value: '%s'. Supported values are: 'function' and 'custom'.", tc.Type)
				case tc.Function.Name == "":
					return Call{}, invalidRequest(w+".function.name", "missing_required_parameter", "Missing required parameter: '%s.function.name'.", w)
				case seen[tc.ID]:
					return Call{}, invalidRequest(where+".tool_calls", "",
						"Invalid parameter: Duplicate value for 'tool_call_id' of %s in %s. Please ensure the tool_call_id is unique across all messages.", tc.ID, where)
				}
				seen[tc.ID] = true
				pending = append(pending, tc.ID)
				msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
		case "tool":
			if m.ToolCallID == nil || *m.ToolCallID == "" {
				return Call{}, invalidRequest(where+".tool_call_id", "missing_required_parameter", "Missing required parameter: '%s.tool_call_id'.", where)
			}
			k := slices.Index(pending, *m.ToolCallID)
			if k < 0 {
				return Call{}, invalidRequest(where+".role", "",
					"Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.")
			}
			pending = slices.Delete(pending, k, k+1)
			msg.ToolCallID = *m.ToolCallID
		}
		call.Messages = append(call.Messages, msg)
	}
	if len(pending) > 0 {
		return Call{}, invalidRequest(fmt.Sprintf("messages[%d].role", len(req.Messages)-1), "",
			"An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", strings.Join(pending, ", "))
	}

	for i, t := range req.Tools {
		where := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return Call{}, invalidRequest(where+".type", "invalid_value", "Invalid value: '%s'. Supported values are: 'function' and 'custom'.", t.Type)
		}
		name := t.Function.Name
		if herr := checkTool(where+".function", name, t.Function.Parameters, t.Function.Strict != nil && *t.Function.Strict, call.Tools); herr != nil {
			return Call{}, herr
		}
		call.Tools = append(call.Tools, name)
	}
	return call, nil
}

// chatContent decodes a message content: absent or null, a string, or an
// array of parts of the given types, whose text parts are joined.
func chatContent(raw json.RawMessage, where string, partTypes ...string) (text string, present bool, herr *HTTPError) {
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
		case "text":
			b.WriteString(p.Text)
		case "refusal":
			b.WriteString(p.Refusal)
		}
	}
	return b.String(), true, nil
}

type chatCompletionJSON struct {
	ID                string           `json:"id"`
	Object            string           `json:"object"`
	Created           int64            `json:"created"`
	Model             string           `json:"model"`
	Choices           []chatChoiceJSON `json:"choices"`
	Usage             chatUsageJSON    `json:"usage"`
	ServiceTier       string           `json:"service_tier"`
	SystemFingerprint string           `json:"system_fingerprint"`
}

type chatChoiceJSON struct {
	Index        int             `json:"index"`
	Message      chatMessageJSON `json:"message"`
	Logprobs     any             `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type chatMessageJSON struct {
	Role        string         `json:"role"`
	Content     *string        `json:"content"`
	Refusal     *string        `json:"refusal"`
	Annotations []any          `json:"annotations"`
	ToolCalls   []chatCallJSON `json:"tool_calls,omitempty"`
}

type chatCallJSON struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatUsageJSON struct {
	PromptTokens            int64            `json:"prompt_tokens"`
	CompletionTokens        int64            `json:"completion_tokens"`
	TotalTokens             int64            `json:"total_tokens"`
	PromptTokensDetails     map[string]int64 `json:"prompt_tokens_details"`
	CompletionTokensDetails map[string]int64 `json:"completion_tokens_details"`
}

// chatCompletion renders reply as a chat.completion object.
func (s *Server) chatCompletion(call Call, reply Reply) chatCompletionJSON {
	msg := chatMessageJSON{Role: "assistant", Annotations: []any{}}
	if reply.Text != "" || len(reply.ToolCalls) == 0 {
		text := reply.Text
		msg.Content = &text
	}
	finish := "stop"
	for _, tc := range reply.ToolCalls {
		args, _ := tc.marshalArguments() // checked by checkReply
		msg.ToolCalls = append(msg.ToolCalls, chatCallJSON{
			ID:       s.toolCallID(),
			Type:     "function",
			Function: chatFunction{Name: tc.Name, Arguments: string(args)},
		})
		finish = "tool_calls"
	}
	if reply.Truncated {
		finish = "length"
	}
	in, out := usage(call, reply)
	return chatCompletionJSON{
		ID:      newID("chatcmpl-"),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   call.Model,
		Choices: []chatChoiceJSON{{Index: 0, Message: msg, FinishReason: finish}},
		Usage: chatUsageJSON{
			PromptTokens: in, CompletionTokens: out, TotalTokens: in + out,
			PromptTokensDetails:     map[string]int64{"cached_tokens": 0, "audio_tokens": 0},
			CompletionTokensDetails: map[string]int64{"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
		},
		ServiceTier:       "default",
		SystemFingerprint: "fp_fakeopenai",
	}
}

// checkParams refuses a body that is not a JSON object or that has a
// parameter not in known.
func checkParams(body []byte, known []string) *HTTPError {
	var params map[string]json.RawMessage
	if err := json.Unmarshal(body, &params); err != nil {
		return invalidRequest("", "", "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON.)")
	}
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !slices.Contains(known, name) {
			return invalidRequest(name, "unknown_parameter", "Unrecognized request argument supplied: %s", name)
		}
	}
	return nil
}

// checkTool checks a function tool's name and schema as OpenAI does. In
// strict mode the schema must close every object (additionalProperties
// false) and require every property.
func checkTool(where, name string, params json.RawMessage, strict bool, earlier []string) *HTTPError {
	if !validToolName(name) {
		return invalidRequest(where+".name", "invalid_value",
			"Invalid '%s.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.", where)
	}
	if slices.Contains(earlier, name) {
		return invalidRequest(where+".name", "duplicate_value", "Duplicate function name '%s' in tools.", name)
	}
	if len(params) == 0 || string(params) == "null" {
		return nil
	}
	var schema map[string]any
	if err := json.Unmarshal(params, &schema); err != nil {
		return invalidRequest(where+".parameters", "invalid_type", "Invalid type for '%s.parameters': expected an object, but got %s instead.", where, jsonKind(params))
	}
	if t, ok := schema["type"]; ok && t != "object" {
		return invalidRequest(where+".parameters", "invalid_function_parameters",
			"Invalid schema for function '%s': schema must be a JSON Schema of 'type: \"object\"', got 'type: \"%v\"'.", name, t)
	}
	if strict {
		if schema["additionalProperties"] != false {
			return invalidRequest(where+".parameters", "invalid_function_parameters",
				"Invalid schema for function '%s': In context=(), 'additionalProperties' is required to be supplied and to be false.", name)
		}
		props, _ := schema["properties"].(map[string]any)
		required, _ := schema["required"].([]any)
		keys := make([]string, 0, len(props))
		for k := range props {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !slices.Contains(required, any(k)) {
				return invalidRequest(where+".parameters", "invalid_function_parameters",
					"Invalid schema for function '%s': In context=(), 'required' is required to be supplied and to be an array including every key in properties. Missing '%s'.", name, k)
			}
		}
	}
	return nil
}

func validToolName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// jsonKind names the JSON type of raw, for error messages.
func jsonKind(raw json.RawMessage) string {
	switch s := strings.TrimSpace(string(raw)); {
	case s == "" || s == "null":
		return "null"
	case s[0] == '{':
		return "an object"
	case s[0] == '[':
		return "an array"
	case s[0] == '"':
		return "a string"
	case s == "true" || s == "false":
		return "a boolean"
	default:
		return "a number"
	}
}

// invalidRequest returns a 400 invalid_request_error.
func invalidRequest(param, code, format string, args ...any) *HTTPError {
	return &HTTPError{Status: http.StatusBadRequest, Type: typeInvalidRequest, Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}
