package risk

import (
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// credentialWords scans words (arguments, assignment values, redirection
// targets) for credential paths.
func (w *walker) credentialWords(words []*syntax.Word, text string) {
	for _, wd := range words {
		for _, f := range fields(wd) {
			w.credentialField(f, text)
		}
	}
}

func (w *walker) credentialField(f *field, text string) {
	if tok := credentialIn(f.val, strings.ContainsAny(f.val, " \t\n")); tok != "" {
		w.report(Credentials, "touches the credential file "+tok, text)
	}
}

// credentialIn returns the first token of s that names a credential
// file, or "". A word is split at characters that cannot be part of a
// path, so "--key=~/.ssh/id_rsa" and "open('/root/.netrc')" are found too.
// In prose (a word with spaces, such as a commit message or a program)
// only tokens with a slash count: "rotate the .env handling" names no
// file, "open('./.env')" does.
func credentialIn(s string, prose bool) string {
	isPathChar := func(r rune) bool {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return false
		case strings.ContainsRune("._-/~+*?@%", r):
			return false
		}
		return true
	}
	for _, tok := range strings.FieldsFunc(s, isPathChar) {
		if prose && !strings.Contains(tok, "/") {
			continue
		}
		if isCredentialPath(tok) {
			return tok
		}
	}
	return ""
}

// credentialDirs hold nothing but secrets.
var credentialDirs = []string{".ssh", ".gnupg", ".password-store", ".aws", ".azure"}

// credentialSuffixes are path endings of credential files in otherwise
// ordinary directories.
var credentialSuffixes = []string{
	".docker/config.json", ".kube/config", "gh/hosts.yml", ".config/gcloud", ".cargo/credentials",
	".cargo/credentials.toml", ".gem/credentials", ".terraform.d/credentials.tfrc.json", ".config/hub",
	"composer/auth.json", "etc/shadow", "etc/shadow-", "etc/gshadow", "etc/gshadow-", "etc/sudoers",
}

// credentialNames are credential files by name alone.
var credentialNames = []string{
	".netrc", "_netrc", ".git-credentials", ".npmrc", ".pypirc", ".pgpass", ".my.cnf", ".vault-token",
	".boto", ".terraformrc", ".dockercfg", ".env", "environ", "credentials.json", "service-account.json",
}

// credentialExts are extensions of key and certificate stores.
var credentialExts = []string{".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".ppk"}

// envTemplates are .env.* files that hold examples, not secrets.
var envTemplates = []string{"example", "sample", "template", "dist", "defaults"}

func isCredentialPath(tok string) bool {
	p := strings.TrimRight(tok, "/")
	if p == "" {
		return false
	}
	comps := strings.Split(p, "/")
	for _, c := range comps[:len(comps)-1] {
		for _, d := range credentialDirs {
			if c == d {
				return true
			}
		}
	}
	name := comps[len(comps)-1]
	for _, d := range credentialDirs {
		if name == d {
			return true
		}
	}
	for _, s := range credentialSuffixes {
		if p == s || strings.HasSuffix(p, "/"+s) || strings.Contains(p, "/"+s+"/") || strings.HasPrefix(p, s+"/") {
			return true
		}
	}
	if strings.HasPrefix(p, "/run/secrets") || strings.HasPrefix(p, "/var/run/secrets") {
		return true
	}
	lower := strings.ToLower(name)
	for _, n := range credentialNames {
		if lower == n {
			return n != "environ" || strings.HasPrefix(p, "/proc/")
		}
	}
	if rest, ok := strings.CutPrefix(lower, ".env."); ok {
		for _, t := range envTemplates {
			if rest == t {
				return false
			}
		}
		return true
	}
	for _, k := range []string{"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"} {
		if strings.HasPrefix(lower, k) {
			return true
		}
	}
	ext := path.Ext(lower)
	for _, e := range credentialExts {
		if ext == e && len(lower) > len(e) {
			return true
		}
	}
	return false
}
