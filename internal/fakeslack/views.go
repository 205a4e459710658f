package fakeslack

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits of a Home tab view that views.publish enforces, as Slack
// documents them.
const (
	maxViewBlocks          = 100
	maxViewBytes           = 250 << 10
	maxPrivateMetadata     = 3000
	maxCallbackID          = 255
	maxBlockID             = 255
	maxActionID            = 255
	maxButtonText          = 75
	maxButtonValue         = 2000
	maxButtonURL           = 3000
	maxSectionText         = 3000
	maxHeaderText          = 150
	maxActionsElements     = 25
	maxContextElements     = 10
	maxConfirmTitle        = 100
	maxConfirmText         = 300
	maxConfirmButtonText   = 30
	viewValidationErrorFmt = "%s [json-pointer:%s]"
)

func init() {
	apiMethods["views.publish"] = apiMethod{botToken, (*Server).viewsPublish}
}

// HomeView is the Home tab last published for a user.
type HomeView struct {
	// User is whose Home tab it is.
	User string
	// ID is the view's ID, the same across publications; Hash changes
	// with each one (views.publish's hash argument must match it).
	ID, Hash string
	// Blocks is the view's blocks as stored: as published, with a
	// block_id given to each block that had none.
	Blocks json.RawMessage
	// PrivateMetadata, CallbackID and ExternalID are as published.
	PrivateMetadata, CallbackID, ExternalID string
	// Publishes counts the accepted publications of the user's home.
	Publishes int
}

// homeState is the fake's App Home side: the published homes and each
// user's app DM channel (the channel of app_home_opened).
type homeState struct {
	views map[string]*HomeView // by user
	ims   map[string]string    // user → the app's DM channel with them
	opens int
}

// Home returns the Home tab last published for user; false when none was.
func (s *Server) Home(user string) (HomeView, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.homes.views[user]
	if v == nil {
		return HomeView{}, false
	}
	c := *v
	c.Blocks = slices.Clone(v.Blocks)
	return c, true
}

// HomeOpens returns how many times OpenHome was called.
func (s *Server) HomeOpens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.homes.opens
}

// OpenHome opens the app's Home tab as user. The app gets an
// app_home_opened event (tab "home", the app's DM channel with the user,
// and, once a home was published for them, the view as it stands), by
// the same path as every event: Socket Mode or signed HTTP, retried alike.
func (s *Server) OpenHome(user string) {
	s.mu.Lock()
	s.homes.opens++
	ev := map[string]any{
		"type": "app_home_opened", "user": user, "channel": s.imChannelLocked(user),
		"tab": "home", "event_ts": s.nextTSLocked(),
	}
	if v := s.homes.views[user]; v != nil {
		ev["view"] = s.wireHomeLocked(v)
	}
	s.mu.Unlock()
	s.deliverEvent(ev)
}

// ClickHome clicks, as user, the element actionID whose value is value in
// the Home tab published for user: the app gets a block_actions
// interaction from a view of type "home" (container {type: view,
// view_id}, the view, the user, the action with its block_id, type, text
// and value; no channel, message nor response_url), over Socket Mode or
// signed HTTP like every interaction. A button with a confirm dialog is
// clicked as confirmed. It fails when the home has no such element.
func (s *Server) ClickHome(user, actionID, value string) error {
	return s.ClickHomeAs(user, user, actionID, value)
}

// ClickHomeAs is ClickHome on the home published for owner, clicked as
// clicker: Slack shows a home only to its user, so a clicker other than
// owner is a forged or replayed payload, which an app must refuse as it
// would a stranger's click.
func (s *Server) ClickHomeAs(owner, clicker, actionID, value string) error {
	s.mu.Lock()
	v := s.homes.views[owner]
	if v == nil {
		s.mu.Unlock()
		return fmt.Errorf("fakeslack: no home was published for %s", owner)
	}
	blockID, elem := findValued(v.Blocks, actionID, value)
	if elem == nil {
		s.mu.Unlock()
		return fmt.Errorf("fakeslack: the home of %s has no element %s with value %q", owner, actionID, value)
	}
	typ, _ := elem["type"].(string)
	act := map[string]any{"action_id": actionID, "block_id": blockID, "type": typ, "action_ts": s.nextTSLocked(), "value": value}
	for _, k := range []string{"text", "style"} {
		if x, ok := elem[k]; ok {
			act[k] = x
		}
	}
	payload := map[string]any{
		"type":                  "block_actions",
		"user":                  s.payloadUserLocked(clicker),
		"api_app_id":            s.opts.AppID,
		"token":                 s.opts.VerificationToken,
		"container":             map[string]any{"type": "view", "view_id": v.ID},
		"trigger_id":            s.triggerIDLocked(),
		"team":                  map[string]any{"id": s.opts.TeamID, "domain": teamDomain},
		"enterprise":            nil,
		"is_enterprise_install": false,
		"view":                  s.wireHomeLocked(v),
		"state":                 map[string]any{"values": map[string]any{}},
		"actions":               []map[string]any{act},
	}
	s.mu.Unlock()
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("fakeslack: marshal block_actions: %w", err)
	}
	s.deliver(&outbound{kind: typeInteractive, payload: b})
	return nil
}

// findValued finds the interactive element actionID with value among the
// blocks' elements (an actions or context block's, a section's accessory,
// an input's element) and returns its block's ID.
func findValued(blocks json.RawMessage, actionID, value string) (string, map[string]any) {
	var bs []map[string]any
	if json.Unmarshal(blocks, &bs) != nil {
		return "", nil
	}
	for _, b := range bs {
		bid, _ := b["block_id"].(string)
		var cands []any
		for _, k := range []string{"accessory", "element"} {
			if x, ok := b[k]; ok {
				cands = append(cands, x)
			}
		}
		if els, ok := b["elements"].([]any); ok {
			cands = append(cands, els...)
		}
		for _, c := range cands {
			if el, ok := c.(map[string]any); ok && el["action_id"] == actionID {
				if v, _ := el["value"].(string); v == value {
					return bid, el
				}
			}
		}
	}
	return "", nil
}

// imChannelLocked is the app's DM channel with user, made on first use.
func (s *Server) imChannelLocked(user string) string {
	if s.homes.ims == nil {
		s.homes.ims = map[string]string{}
	}
	ch, ok := s.homes.ims[user]
	if !ok {
		ch = fmt.Sprintf("D%08X", s.nextSeqLocked())
		s.homes.ims[user] = ch
	}
	return ch
}

// memberLocked says whether user is a member of the workspace: one set
// with SetUser, the bot, or an ID shaped like Slack's user IDs (as
// users.info describes them).
func (s *Server) memberLocked(user string) bool {
	if _, ok := s.users[user]; ok || user == s.opts.BotUserID {
		return true
	}
	return len(user) > 1 && (user[0] == 'U' || user[0] == 'W') && strings.ToUpper(user) == user
}

// wireHomeLocked renders a home as Slack's view object.
func (s *Server) wireHomeLocked(v *HomeView) map[string]any {
	return map[string]any{
		"id": v.ID, "team_id": s.opts.TeamID, "type": "home", "blocks": v.Blocks,
		"private_metadata": v.PrivateMetadata, "callback_id": v.CallbackID,
		"state": map[string]any{"values": map[string]any{}}, "hash": v.Hash,
		"title":          map[string]any{"type": "plain_text", "text": "View Title", "emoji": true},
		"clear_on_close": false, "notify_on_close": false, "close": nil, "submit": nil,
		"previous_view_id": nil, "root_view_id": v.ID, "app_id": s.opts.AppID,
		"external_id": v.ExternalID, "app_installed_team_id": s.opts.TeamID, "bot_id": s.opts.BotID,
	}
}

// viewsPublish publishes a user's Home tab with the checks Slack
// documents: user_id and view are required; the user must be a member of
// the workspace (user_not_found); the view is a JSON object of type
// "home" of at most 250 kB (view_too_large) with at most 100 blocks, each
// with a type, block IDs unique and of at most 255 characters, action IDs
// of at most 255 characters and unique in their block, and Block Kit's
// text limits (invalid_arguments, with a message per problem); a hash, when
// given, must be the current view's (hash_conflict); an external_id may
// name one view only (duplicate_external_id). The answer is the view, with
// a new hash.
func (s *Server) viewsPublish(p params) (map[string]any, *apiError) {
	user := p.get("user_id")
	var missing []string
	if user == "" {
		missing = append(missing, "missing required field: user_id")
	}
	raw, hasView, err := p.rawJSON("view")
	if !hasView {
		missing = append(missing, "missing required field: view")
	}
	if len(missing) > 0 {
		return nil, &apiError{code: "invalid_arguments", errors: missing}
	}
	if err != nil || !isJSONObject(raw) {
		return nil, &apiError{code: "invalid_arguments", errors: []string{"view must be a JSON object [json-pointer:/view]"}}
	}
	if len(raw) > maxViewBytes {
		return nil, errCode("view_too_large")
	}
	var view struct {
		Type            string          `json:"type"`
		Blocks          json.RawMessage `json:"blocks"`
		PrivateMetadata string          `json:"private_metadata"`
		CallbackID      string          `json:"callback_id"`
		ExternalID      string          `json:"external_id"`
	}
	if err := json.Unmarshal(raw, &view); err != nil {
		return nil, &apiError{code: "invalid_arguments", errors: []string{"view is not a valid view object [json-pointer:/view]"}}
	}
	blocks, problems := checkHomeView(view.Type, view.Blocks, view.PrivateMetadata, view.CallbackID)
	if len(problems) > 0 {
		return nil, &apiError{code: "invalid_arguments", errors: problems}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.memberLocked(user) {
		return nil, errCode("user_not_found")
	}
	cur := s.homes.views[user]
	if p.has("hash") && p.get("hash") != "" && (cur == nil || cur.Hash != p.get("hash")) {
		return nil, errCode("hash_conflict")
	}
	if view.ExternalID != "" {
		for u, v := range s.homes.views {
			if u != user && v.ExternalID == view.ExternalID {
				return nil, errCode("duplicate_external_id")
			}
		}
	}
	if s.homes.views == nil {
		s.homes.views = map[string]*HomeView{}
	}
	if cur == nil {
		cur = &HomeView{User: user, ID: fmt.Sprintf("V%010X", s.nextSeqLocked())}
		s.homes.views[user] = cur
	}
	cur.Hash = fmt.Sprintf("%d.%s", time.Now().Unix(), randomHex(4))
	cur.Blocks = blocks
	cur.PrivateMetadata, cur.CallbackID, cur.ExternalID = view.PrivateMetadata, view.CallbackID, view.ExternalID
	cur.Publishes++
	return map[string]any{"view": s.wireHomeLocked(cur)}, nil
}

// checkHomeView checks a Home tab view's fields and returns its blocks as
// stored (a block_id given to each block without one), or what is wrong,
// one message per problem.
func checkHomeView(typ string, rawBlocks json.RawMessage, privateMetadata, callbackID string) (json.RawMessage, []string) {
	var problems []string
	bad := func(msg, ptr string, args ...any) {
		problems = append(problems, fmt.Sprintf(viewValidationErrorFmt, fmt.Sprintf(msg, args...), ptr))
	}
	switch typ {
	case "":
		bad("missing required field: type", "/view")
	case "home":
	default:
		bad("must be home for views.publish", "/view/type")
	}
	if utf8.RuneCountInString(privateMetadata) > maxPrivateMetadata {
		bad("must be less than %d characters", "/view/private_metadata", maxPrivateMetadata+1)
	}
	if utf8.RuneCountInString(callbackID) > maxCallbackID {
		bad("must be less than %d characters", "/view/callback_id", maxCallbackID+1)
	}
	var blocks []map[string]any
	if len(rawBlocks) == 0 || string(rawBlocks) == "null" {
		bad("missing required field: blocks", "/view")
		return nil, problems
	}
	if err := json.Unmarshal(rawBlocks, &blocks); err != nil {
		bad("must be an array of blocks", "/view/blocks")
		return nil, problems
	}
	if len(blocks) > maxViewBlocks {
		bad("must provide an array with no more than %d items", "/view/blocks", maxViewBlocks)
	}
	ids := map[string]bool{}
	for i, b := range blocks {
		at := fmt.Sprintf("/view/blocks/%d", i)
		typ, _ := b["type"].(string)
		if typ == "" {
			bad("missing required field: type", at)
			continue
		}
		id, _ := b["block_id"].(string)
		switch {
		case id == "":
			b["block_id"] = randomHex(3)[:5]
		case utf8.RuneCountInString(id) > maxBlockID:
			bad("must be less than %d characters", at+"/block_id", maxBlockID+1)
		case ids[id]:
			bad("%q is not unique in the view", at+"/block_id", id)
		}
		ids[id] = true
		var elems []any
		switch typ {
		case "section":
			n, ok := textOf(b["text"])
			if n > maxSectionText {
				bad("must be less than %d characters", at+"/text/text", maxSectionText+1)
			}
			if _, hasFields := b["fields"]; !ok && !hasFields {
				bad("must provide either text or fields", at)
			}
			if acc, ok := b["accessory"]; ok {
				elems = append(elems, acc)
			}
		case "header":
			n, ok := textOf(b["text"])
			if !ok {
				bad("missing required field: text", at)
			}
			if n > maxHeaderText {
				bad("must be less than %d characters", at+"/text/text", maxHeaderText+1)
			}
		case "actions":
			els, _ := b["elements"].([]any)
			if len(els) == 0 || len(els) > maxActionsElements {
				bad("must provide an array with between 1 and %d items", at+"/elements", maxActionsElements)
			}
			elems = els
		case "context":
			els, _ := b["elements"].([]any)
			if len(els) == 0 || len(els) > maxContextElements {
				bad("must provide an array with between 1 and %d items", at+"/elements", maxContextElements)
			}
			elems = els
		}
		actionIDs := map[string]bool{}
		for j, e := range elems {
			el, _ := e.(map[string]any)
			ptr := fmt.Sprintf("%s/elements/%d", at, j)
			if typ == "section" {
				ptr = at + "/accessory"
			}
			problems = append(problems, checkElement(el, ptr, actionIDs)...)
		}
	}
	if len(problems) > 0 {
		return nil, problems
	}
	out, _ := json.Marshal(blocks)
	return out, nil
}

// checkElement checks an interactive element: its action_id's length and
// uniqueness in its block, and a button's text, value, url and confirm
// dialog.
func checkElement(el map[string]any, ptr string, actionIDs map[string]bool) []string {
	var problems []string
	bad := func(msg, at string, args ...any) {
		problems = append(problems, fmt.Sprintf(viewValidationErrorFmt, fmt.Sprintf(msg, args...), at))
	}
	if el == nil {
		return nil
	}
	if aid, ok := el["action_id"].(string); ok {
		if utf8.RuneCountInString(aid) > maxActionID {
			bad("must be less than %d characters", ptr+"/action_id", maxActionID+1)
		}
		if actionIDs[aid] {
			bad("%q is not unique in the block", ptr+"/action_id", aid)
		}
		actionIDs[aid] = true
	}
	if el["type"] != "button" {
		return problems
	}
	if n, ok := textOf(el["text"]); !ok {
		bad("missing required field: text", ptr)
	} else if n > maxButtonText {
		bad("must be less than %d characters", ptr+"/text/text", maxButtonText+1)
	}
	if v, _ := el["value"].(string); utf8.RuneCountInString(v) > maxButtonValue {
		bad("must be less than %d characters", ptr+"/value", maxButtonValue+1)
	}
	if u, _ := el["url"].(string); utf8.RuneCountInString(u) > maxButtonURL {
		bad("must be less than %d characters", ptr+"/url", maxButtonURL+1)
	}
	if c, ok := el["confirm"].(map[string]any); ok {
		for _, f := range []struct {
			name string
			max  int
		}{{"title", maxConfirmTitle}, {"text", maxConfirmText}, {"confirm", maxConfirmButtonText}, {"deny", maxConfirmButtonText}} {
			n, ok := textOf(c[f.name])
			switch {
			case !ok && f.name != "deny" && f.name != "confirm":
				bad("missing required field: %s", ptr+"/confirm", f.name)
			case n > f.max:
				bad("must be less than %d characters", ptr+"/confirm/"+f.name+"/text", f.max+1)
			}
		}
	}
	return problems
}

// textOf returns the length in characters of a text object's text, and
// whether there is one.
func textOf(x any) (int, bool) {
	t, ok := x.(map[string]any)
	if !ok {
		return 0, false
	}
	s, ok := t["text"].(string)
	if !ok {
		return 0, false
	}
	return utf8.RuneCountInString(s), true
}
