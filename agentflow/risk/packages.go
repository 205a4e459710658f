package risk

import (
	"slices"
	"strings"
)

// pkgTool is a package manager whose installs are subcommands.
type pkgTool struct {
	names []string
	spec  optSpec  // options before the subcommand that take a value
	verbs []string // installing subcommands; words separated by spaces
	bare  bool     // run without a subcommand, it installs (yarn)
}

// pkgTools lists subcommand-style package managers. Every install
// counts, including installing a project's own dependencies (npm ci, pip
// install -r, uv sync): they all fetch and run code from a registry.
var pkgTools = []pkgTool{
	{names: []string{"apt", "apt-get", "aptitude"}, spec: optSpec{short: "oct", long: []string{"option", "config-file", "target-release"}},
		verbs: []string{"install", "reinstall", "upgrade", "full-upgrade", "dist-upgrade", "safe-upgrade", "build-dep"}},
	{names: []string{"yum", "dnf", "microdnf", "tdnf"}, spec: optSpec{short: "cdexR", long: []string{"config", "releasever", "installroot", "exclude", "enablerepo", "disablerepo", "repo", "repofrompath", "downloaddir", "destdir"}},
		verbs: []string{"install", "in", "reinstall", "update", "upgrade", "up", "localinstall", "groupinstall", "group install", "groups install", "downgrade", "distro-sync", "upgrade-minimal", "update-minimal"}},
	{names: []string{"zypper"}, spec: optSpec{short: "cR", long: []string{"config", "root"}},
		verbs: []string{"install", "in", "update", "up", "dist-upgrade", "dup", "patch", "source-install", "si"}},
	{names: []string{"apk"}, spec: optSpec{short: "Xp", long: []string{"repository", "root", "arch", "cache-dir", "keys-dir", "repositories-file"}},
		verbs: []string{"add", "upgrade", "fix"}},
	{names: []string{"snap"}, verbs: []string{"install", "refresh"}},
	{names: []string{"flatpak"}, verbs: []string{"install", "update"}},
	{names: []string{"brew"}, verbs: []string{"install", "reinstall", "upgrade", "bundle"}},
	{names: []string{"port"}, verbs: []string{"install", "upgrade"}},
	{names: []string{"pip"}, spec: optSpec{long: []string{"proxy", "log", "cache-dir", "cert", "client-cert", "timeout", "retries", "exists-action", "trusted-host", "python"}},
		verbs: []string{"install"}},
	{names: []string{"pipx"}, verbs: []string{"install", "inject", "upgrade", "upgrade-all", "reinstall", "reinstall-all"}},
	{names: []string{"uv"}, spec: optSpec{long: []string{"directory", "project", "cache-dir", "config-file", "python"}},
		verbs: []string{"pip install", "pip sync", "add", "sync", "tool install"}},
	{names: []string{"poetry"}, spec: optSpec{short: "C", long: []string{"directory", "project"}}, verbs: []string{"add", "install", "update"}},
	{names: []string{"pipenv"}, verbs: []string{"install", "update", "sync"}},
	{names: []string{"conda", "mamba", "micromamba"}, verbs: []string{"install", "create", "update", "upgrade"}},
	{names: []string{"npm"}, spec: optSpec{short: "w", long: []string{"prefix", "workspace", "registry", "cache", "userconfig", "globalconfig"}},
		verbs: []string{"install", "i", "in", "ins", "inst", "insta", "instal", "isnt", "isnta", "isntal", "isntall", "add",
			"ci", "clean-install", "install-clean", "isntall-clean", "it", "install-test", "cit", "install-ci-test", "update", "up", "upgrade", "udpate"}},
	{names: []string{"pnpm"}, spec: optSpec{short: "CF", long: []string{"dir", "filter"}}, verbs: []string{"add", "install", "i", "update", "up", "upgrade", "install-test", "it"}},
	{names: []string{"yarn"}, spec: optSpec{long: []string{"cwd"}}, verbs: []string{"add", "install", "upgrade", "up", "global add", "global upgrade"}, bare: true},
	{names: []string{"bun"}, spec: optSpec{long: []string{"cwd"}}, verbs: []string{"add", "a", "install", "i", "update"}},
	{names: []string{"go"}, spec: optSpec{short: "C"}, verbs: []string{"install", "get"}},
	{names: []string{"cargo"}, spec: optSpec{short: "CZ", long: []string{"config", "color"}}, verbs: []string{"install", "add", "binstall"}},
	{names: []string{"gem"}, verbs: []string{"install", "update"}},
	{names: []string{"bundle", "bundler"}, verbs: []string{"install", "add", "update"}},
	{names: []string{"composer"}, spec: optSpec{short: "d", long: []string{"working-dir"}}, verbs: []string{"install", "require", "update", "upgrade", "global require"}},
	{names: []string{"nix"}, verbs: []string{"profile install", "profile add"}},
	{names: []string{"rustup"}, verbs: []string{"install", "update", "toolchain install", "component add", "target add"}},
	{names: []string{"gh"}, verbs: []string{"extension install", "ext install", "extension upgrade", "ext upgrade"}},
	{names: []string{"dotnet"}, verbs: []string{"tool install", "tool update"}},
	{names: []string{"luarocks", "pecl", "asdf", "mise", "pyenv", "rbenv", "nvm", "sdk", "volta"}, verbs: []string{"install"}},
}

// packages reports package installs.
func (w *walker) packages(base string, args []*field, sc *scope, text string) {
	if rest, ok := strings.CutPrefix(base, "pip"); ok && strings.Trim(rest, "0123456789.") == "" {
		base = "pip"
	}
	installs := func(how string) {
		w.report(PackageInstall, "installs packages with "+how, text)
	}
	switch base {
	case "pacman", "yay", "paru":
		for _, a := range args {
			v := a.val
			switch {
			case strings.HasPrefix(v, "-U"):
				installs(base + " " + v)
			case strings.HasPrefix(v, "-S") && !strings.ContainsAny(v[2:], "silgcp"):
				installs(base + " " + v)
			case v == "--sync" && !slices.ContainsFunc(args, func(f *field) bool {
				return f.val == "--search" || f.val == "--info" || f.val == "--list" || f.val == "--groups" || f.val == "--clean" || f.val == "--print"
			}):
				installs(base + " --sync")
			case v == "--upgrade":
				installs(base + " --upgrade")
			default:
				continue
			}
			return
		}
		return
	case "dpkg", "rpm", "nix-env":
		for _, a := range args {
			v := a.val
			flag := false
			switch base {
			case "dpkg":
				flag = v == "-i" || v == "--install" || v == "--unpack"
			case "rpm":
				flag = v == "--install" || v == "--upgrade" || v == "--freshen" || v == "--reinstall" ||
					len(v) > 1 && v[0] == '-' && strings.IndexByte("iUF", v[1]) >= 0
			case "nix-env":
				flag = v == "--install" || v == "--upgrade" || len(v) > 1 && v[0] == '-' && (v[1] == 'i' || v[1] == 'u')
			}
			if flag {
				installs(base + " " + v)
				return
			}
		}
		return
	case "cpan", "cpanm", "easy_install":
		if len(parseArgs(args, optSpec{}).operands) > 0 {
			installs(base)
		}
		return
	case "dotnet":
		ops := parseArgs(args, optSpec{}).operands
		if len(ops) > 1 && ops[0].val == "add" && slices.ContainsFunc(ops[1:min(3, len(ops))], func(f *field) bool { return f.val == "package" }) {
			installs("dotnet add package")
			return
		}
	}
	for _, t := range pkgTools {
		if !slices.Contains(t.names, base) {
			continue
		}
		p := parseArgs(args, t.spec)
		ops := p.operands
		if len(ops) == 0 && t.bare && !p.has("-v", "--version", "-h", "--help") {
			installs(base)
			return
		}
		for _, verb := range t.verbs {
			words := strings.Fields(verb)
			if len(ops) < len(words) {
				continue
			}
			match := true
			for i, wd := range words {
				if ops[i].dyn || ops[i].val != wd {
					match = false
					break
				}
			}
			if match {
				installs(base + " " + verb)
				return
			}
		}
	}
}
