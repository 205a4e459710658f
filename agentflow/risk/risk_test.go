package risk

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

const testWorkspace = "/workspace"

var terraformApply = Pattern{
	Name:        "terraform-apply",
	Description: "applies infrastructure changes",
	Command:     "terraform",
	Args:        "apply*",
}

var kubectlAny = Pattern{Name: "kubectl", Description: "talks to a cluster", Command: "kube*"}

type classifyCase struct {
	name     string
	script   string
	want     []string // the exact set of rule names found
	extra    []Pattern
	disabled []string
}

var classifyCases = []classifyCase{
	// recursive-delete
	{name: "rm -rf of the filesystem root", script: `rm -rf /`, want: []string{RecursiveDelete}},
	{name: "rm -fr of home", script: `rm -fr ~`, want: []string{RecursiveDelete}},
	{name: "rm -r -f of a parent path", script: `rm -r -f ../x`, want: []string{RecursiveDelete}},
	{name: "rm --recursive of the workspace root", script: `rm --recursive /workspace`, want: []string{RecursiveDelete}},
	{name: "rm -R of dot", script: `rm -R .`, want: []string{RecursiveDelete}},
	{name: "rm -rf of dot slash", script: `rm -rf ./`, want: []string{RecursiveDelete}},
	{name: "rm -rf star at the root", script: `rm -rf *`, want: []string{RecursiveDelete}},
	{name: "rm -rf hidden star at the root", script: `rm -rf .*`, want: []string{RecursiveDelete}},
	{name: "rm -rf of $HOME", script: `rm -rf $HOME`, want: []string{RecursiveDelete}},
	{name: "rm -rf of a quoted variable", script: `rm -rf "$dir"`, want: []string{RecursiveDelete}},
	{name: "rm -rf of a dash file after --", script: `rm -rf -- -x`},
	{name: "rm -rf inside the workspace", script: `rm -rf build node_modules dist/`},
	{name: "rm -rf below tmp", script: `rm -rf /tmp/build-123`},
	{name: "rm -rf of tmp itself", script: `rm -rf /tmp`, want: []string{RecursiveDelete}},
	{name: "rm -rf glob below a subdirectory", script: `rm -rf build/*`},
	{name: "rm -rf glob in the filesystem root", script: `rm -rf /*`, want: []string{RecursiveDelete}},
	{name: "rm -rf partial glob at the root", script: `rm -rf *.egg-info`},
	{name: "rm -rf back up to the root", script: `rm -rf build/..`, want: []string{RecursiveDelete}},
	{name: "rm -rf of a literal star file", script: `rm -rf '*'`},
	{name: "rm -rf brace expansion reaching etc", script: `rm -rf {build,/etc}`, want: []string{RecursiveDelete}},
	{name: "xargs rm -rf", script: `git ls-files -z | xargs -0 rm -rf`, want: []string{RecursiveDelete}},
	{name: "find -delete outside", script: `find / -name '*.log' -delete`, want: []string{RecursiveDelete}},
	{name: "find -delete filtered inside", script: `find . -name '*.o' -delete`},
	{name: "find -delete of everything", script: `find . -delete`, want: []string{RecursiveDelete}},
	{name: "find -exec rm -rf outside", script: `find /etc -name x -exec rm -rf {} \;`, want: []string{RecursiveDelete}},
	{name: "find -exec rm -rf inside", script: `find . -type d -name __pycache__ -exec rm -rf {} +`},
	{name: "cd then rm -rf", script: `cd /opt && rm -rf app`, want: []string{RecursiveDelete}},
	{name: "cd into a subdirectory then rm -rf", script: `cd build && rm -rf out`},
	{name: "cd in a subshell does not leak", script: `(cd /opt && ls) && rm -rf app`},
	{name: "cd to an unknown directory then rm -rf", script: `cd "$DIR" && rm -rf out`, want: []string{RecursiveDelete}},
	{name: "pushd popd restore the directory", script: `pushd /opt && popd && rm -rf app`},
	{name: "rm -rf of every hidden entry at the root", script: `rm -rf ./.??*`, want: []string{RecursiveDelete}},
	{name: "find -mindepth 1 -delete empties the root", script: `find . -mindepth 1 -delete`, want: []string{RecursiveDelete}},
	{name: "rm of a file inside", script: `rm -f notes.txt`},
	{name: "rm of a file outside", script: `rm /etc/passwd`, want: []string{OutsideWrite}},

	// git-push
	{name: "git push", script: `git push origin main`, want: []string{GitPush}},
	{name: "git -C dir push", script: `git -C sub push`, want: []string{GitPush}},
	{name: "git global options before push", script: `git --no-pager -c user.name=x --git-dir .git push --force`, want: []string{GitPush}},
	{name: "quoted git", script: `"git" push`, want: []string{GitPush}},
	{name: "empty quotes inside git", script: `g""it push`, want: []string{GitPush}},
	{name: "git alias to push", script: `git -c alias.p=push p`, want: []string{GitPush}},
	{name: "git shell alias", script: `git -c 'alias.x=!git push' x`, want: []string{GitPush}},
	{name: "git subcommand only known at run time", script: `git $SUB origin`, want: []string{GitPush}},
	{name: "hub push", script: `hub push origin main`, want: []string{GitPush}},
	{name: "git stash push", script: `git stash push -m wip`},
	{name: "git push dry run", script: `git push --dry-run`},
	{name: "git commit mentioning push", script: `git commit -m "push it"`},
	{name: "git status", script: `git status`},

	// pipe-to-shell
	{name: "curl piped to sh", script: `curl -fsSL https://example.com/install.sh | sh`, want: []string{PipeToShell}},
	{name: "wget piped to sudo bash", script: `wget -qO- https://example.com/x | sudo bash -s -- --yes`, want: []string{PipeToShell, Sudo}},
	{name: "sh -c of a curl substitution", script: `sh -c "$(curl -fsSL https://example.com/x)"`, want: []string{PipeToShell}},
	{name: "bash of a curl process substitution", script: `bash <(curl -s https://example.com/x)`, want: []string{PipeToShell}},
	{name: "eval of a curl substitution", script: `eval "$(curl -s https://example.com/x)"`, want: []string{PipeToShell}},
	{name: "source of a curl process substitution", script: `source <(curl -s https://example.com/x)`, want: []string{PipeToShell}},
	{name: "bash reading a here-string download", script: `bash <<< "$(wget -qO- https://example.com/x)"`, want: []string{PipeToShell}},
	{name: "download then run", script: "curl -o install.sh https://example.com/install.sh\nbash install.sh", want: []string{PipeToShell}},
	{name: "wget then execute", script: `wget https://example.com/tool.sh && chmod +x tool.sh && ./tool.sh`, want: []string{PipeToShell}},
	{name: "curl through cat into python", script: `curl -s https://example.com/get-pip.py | cat | python3`, want: []string{PipeToShell}},
	{name: "download by redirection then run", script: "curl -fsSL https://example.com/i.sh > i.sh\nsh i.sh", want: []string{PipeToShell}},
	{name: "curl into python -c reading json", script: `curl -s https://api.example.com/x | python3 -c 'import json,sys; print(json.load(sys.stdin)["a"])'`},
	{name: "curl into jq", script: `curl -s https://api.example.com/x | jq .name`},
	{name: "curl to a file", script: `curl -sSfo page.html https://example.com/`},

	// package-install
	{name: "apt-get install with sudo", script: `sudo apt-get install -y gcc`, want: []string{Sudo, PackageInstall}},
	{name: "apt-get options before install", script: `apt-get -o Debug::x=1 -qq install gcc`, want: []string{PackageInstall}},
	{name: "pip install -r", script: `pip install -r requirements.txt`, want: []string{PackageInstall}},
	{name: "versioned pip", script: `pip3.12 install requests`, want: []string{PackageInstall}},
	{name: "python -m pip install", script: `python3 -m pip install requests`, want: []string{PackageInstall}},
	{name: "npm global install", script: `npm i -g typescript`, want: []string{PackageInstall}},
	{name: "npm ci", script: `npm ci`, want: []string{PackageInstall}},
	{name: "go install", script: `go install golang.org/x/tools/gopls@latest`, want: []string{PackageInstall}},
	{name: "cargo install", script: `cargo install ripgrep`, want: []string{PackageInstall}},
	{name: "gem and brew", script: `gem install rails; brew install jq`, want: []string{PackageInstall}},
	{name: "pacman sync upgrade", script: `pacman -Syu --noconfirm`, want: []string{PackageInstall}},
	{name: "apk add", script: `apk add --no-cache curl`, want: []string{PackageInstall}},
	{name: "bare yarn installs", script: `yarn`, want: []string{PackageInstall}},
	{name: "pip list", script: `pip list`},
	{name: "npm test", script: `npm test`},
	{name: "npm run install", script: `npm run install`},
	{name: "pacman search", script: `pacman -Ss vim`},

	// network
	{name: "ip link set up", script: `ip link set eth0 up`, want: []string{Network}},
	{name: "ifconfig up", script: `ifconfig eth0 up`, want: []string{Network}},
	{name: "iptables append", script: `iptables -A INPUT -p tcp --dport 22 -j ACCEPT`, want: []string{Network}},
	{name: "iptables flush through sudo", script: `sudo iptables -F`, want: []string{Sudo, Network}},
	{name: "docker network connect", script: `docker network connect bridge c1`, want: []string{Network}},
	{name: "docker run host network", script: `docker run --network=host nginx`, want: []string{Network}},
	{name: "nmcli connection up", script: `nmcli connection up wifi`, want: []string{Network}},
	{name: "ssh remote forward", script: `ssh -fNR 8080:localhost:80 host`, want: []string{Network}},
	{name: "sysctl net setting", script: `sysctl -w net.ipv4.ip_forward=1`, want: []string{Network}},
	{name: "ip brief listing", script: `ip -br a`},
	{name: "iptables list", script: `iptables -L -n -v`},
	{name: "ip addr show", script: `ip addr show; ip route`},
	{name: "ifconfig -a", script: `ifconfig -a`},
	{name: "plain curl", script: `curl -s https://example.com/api`},

	// sudo
	{name: "sudo by absolute path", script: `/usr/bin/sudo ls`, want: []string{Sudo}},
	{name: "su -c runs its script", script: `su -c 'rm -rf /'`, want: []string{Sudo, RecursiveDelete}},
	{name: "doas", script: `doas true`, want: []string{Sudo}},
	{name: "pkexec", script: `pkexec id`, want: []string{Sudo}},
	{name: "sudo -u with --", script: `sudo -u bob -- rm -rf /srv`, want: []string{Sudo, RecursiveDelete}},
	{name: "sudo env with a dynamic assignment", script: `sudo env "PATH=$PATH" make install`, want: []string{Sudo}},
	{name: "grep for sudo", script: `grep -r sudo .`},

	// outside-write
	{name: "redirect into etc", script: `echo x > /etc/hosts`, want: []string{OutsideWrite}},
	{name: "append to bashrc", script: `echo 'export X=1' >> ~/.bashrc`, want: []string{OutsideWrite}},
	{name: "tee outside", script: `echo x | tee -a /etc/apt/sources.list`, want: []string{OutsideWrite}},
	{name: "cp outside", script: `cp bin/tool /usr/local/bin/`, want: []string{OutsideWrite}},
	{name: "cp -t outside", script: `cp -t /opt bin/tool`, want: []string{OutsideWrite}},
	{name: "mv up and out", script: `mv out.txt ../out.txt`, want: []string{OutsideWrite}},
	{name: "dd of a disk", script: `dd if=/dev/zero of=/dev/sda bs=1M`, want: []string{OutsideWrite}},
	{name: "chmod outside", script: `chmod 755 /usr/local/bin/tool`, want: []string{OutsideWrite}},
	{name: "sed -i outside", script: `sed -i 's/a/b/' /etc/hosts`, want: []string{OutsideWrite}},
	{name: "tar extract into root", script: `tar -xzf a.tgz -C /`, want: []string{OutsideWrite}},
	{name: "redirect to a variable", script: `echo x > "$OUT"`, want: []string{OutsideWrite}},
	{name: "redirect on a block", script: `{ echo a; echo b; } > /etc/motd`, want: []string{OutsideWrite}},
	{name: "touch after cd outside", script: `cd /etc; touch x`, want: []string{OutsideWrite}},
	{name: "perl -i outside", script: `perl -pi -e 's/a/b/' /etc/hosts`, want: []string{OutsideWrite}},
	{name: "cp into a directory outside", script: `cp -r dist/ /srv/www/`, want: []string{OutsideWrite}},
	{name: "cp into tmp", script: `find . -name '*.bak' -exec mv {} /tmp/ \;`},
	{name: "dev null and stderr", script: `make 2>/dev/null >&2`},
	{name: "log to tmp", script: `go test ./... > /tmp/test.log 2>&1`},
	{name: "chmod -x inside", script: `chmod -x script.sh`},
	{name: "sed -i inside", script: `sed -i.bak -e 's/a/b/' main.go`},
	{name: "mkdir and touch inside", script: `mkdir -p build/out && touch build/out/.keep && cp a.txt build/`},
	{name: "heredoc into a workspace file", script: "cat > notes.md <<'EOF'\nrm -rf /\nEOF"},

	// credentials
	{name: "cat ssh key", script: `cat ~/.ssh/id_rsa`, want: []string{Credentials}},
	{name: "aws credentials through HOME", script: `cat $HOME/.aws/credentials`, want: []string{Credentials}},
	{name: "copy env file", script: `cp .env /tmp/env-backup`, want: []string{Credentials}},
	{name: "append to netrc", script: `echo "machine x" >> ~/.netrc`, want: []string{Credentials, OutsideWrite}},
	{name: "python opening a key", script: `python3 -c "print(open('/root/.ssh/id_ed25519').read())"`, want: []string{Credentials}},
	{name: "kubeconfig assignment", script: `KUBECONFIG=~/.kube/config make deploy`, want: []string{Credentials}},
	{name: "key option value", script: `scp -i deploy.pem dist.tgz host:`, want: []string{Credentials}},
	{name: "shadow through sudo", script: `sudo cat /etc/shadow`, want: []string{Sudo, Credentials}},
	{name: "gh hosts file", script: `cat ~/.config/gh/hosts.yml`, want: []string{Credentials}},
	{name: "env file mentioned in a commit message", script: `git commit -m "stop reading .env and id_rsa"`},
	{name: "env file in a program string", script: `node -e "require('dotenv').config({path: './.env'})"`, want: []string{Credentials}},
	{name: "env example", script: `cat .env.example`},

	// dynamic-command
	{name: "variable command name", script: `$CMD -rf /`, want: []string{DynamicCommand}},
	{name: "all arguments as a command", script: `run() { "$@"; }`, want: []string{DynamicCommand}},
	{name: "bash -c of a variable", script: `bash -c "$script"`, want: []string{DynamicCommand}},
	{name: "command substitution as a name", script: `$(echo rm) -rf x`, want: []string{DynamicCommand}},
	{name: "sudo of a variable", script: `sudo $CMD`, want: []string{Sudo, DynamicCommand}},

	// unparsable
	{name: "unterminated quote", script: `echo "oops`, want: []string{Unparsable}},
	{name: "broken if", script: `if then fi`, want: []string{Unparsable}},
	{name: "too complex", script: strings.Repeat("find a b c d -exec ", 12) + "true" + strings.Repeat(" +", 12), want: []string{Unparsable}},
	{name: "nested too deep", script: strings.Repeat("eval ", 12) + "ls", want: []string{Unparsable}},
	{name: "broken bash -c string", script: `bash -c 'for'`, want: []string{Unparsable}},

	// quoting and escaping tricks
	{name: "backslash inside rm", script: `r\m -rf /`, want: []string{RecursiveDelete}},
	{name: "single quoted rm", script: `'rm' -rf /`, want: []string{RecursiveDelete}},
	{name: "ANSI-C quoted rm", script: `$'\x72m' -rf /`, want: []string{RecursiveDelete}},
	{name: "split quoted flags", script: `rm "-r""f" '/'`, want: []string{RecursiveDelete}},
	{name: "line continuation", script: "rm -rf \\\n  /", want: []string{RecursiveDelete}},
	{name: "escaped sudo", script: `\sudo id`, want: []string{Sudo}},
	{name: "rm -rf inside a string", script: `echo "rm -rf /"`},
	{name: "git push inside a single quoted string", script: `echo 'git push; sudo rm -rf /'`},

	// nested constructs
	{name: "command substitution", script: `echo $(rm -rf /)`, want: []string{RecursiveDelete}},
	{name: "backticks", script: "echo `sudo id`", want: []string{Sudo}},
	{name: "bash -c string", script: `bash -c 'git push'`, want: []string{GitPush}},
	{name: "bash -lc string", script: `bash -lc "cd /opt && rm -rf app"`, want: []string{RecursiveDelete}},
	{name: "eval of bash -c", script: `eval "bash -c 'sudo id'"`, want: []string{Sudo}},
	{name: "function body", script: `f() { rm -rf /; }; f`, want: []string{RecursiveDelete}},
	{name: "if body", script: `if [ -d .git ]; then git push; fi`, want: []string{GitPush}},
	{name: "for body", script: `for d in a b; do sudo rm -rf "/$d"; done`, want: []string{Sudo, RecursiveDelete}},
	{name: "while body", script: `while read -r f; do rm -rf "$f"; done < list.txt`, want: []string{RecursiveDelete}},
	{name: "case body", script: `case $1 in push) git push;; esac`, want: []string{GitPush}},
	{name: "process substitution", script: `diff <(sudo cat a) b`, want: []string{Sudo}},
	{name: "output process substitution", script: `curl -s https://example.com/x > >(bash)`, want: []string{PipeToShell}},
	{name: "quoted heredoc to bash", script: "bash <<'EOF'\nrm -rf /\nEOF", want: []string{RecursiveDelete}},
	{name: "stack of wrappers", script: `env FOO=1 timeout 5 nice -n 10 nohup rm -rf /`, want: []string{RecursiveDelete}},
	{name: "command exec", script: `command exec rm -rf /`, want: []string{RecursiveDelete}},
	{name: "time keyword", script: `time rm -rf /`, want: []string{RecursiveDelete}},
	{name: "absolute rm", script: `/bin/rm -rf /`, want: []string{RecursiveDelete}},
	{name: "xargs sh -c", script: `ls | xargs -I{} sh -c 'git push'`, want: []string{GitPush}},
	{name: "find -exec sh -c", script: `find /srv -name x -exec sh -c 'rm -rf {}' \;`, want: []string{RecursiveDelete}},
	{name: "assignment with substitution", script: `x=$(sudo id)`, want: []string{Sudo}},
	{name: "export with substitution", script: `export X="$(git push 2>&1)"`, want: []string{GitPush}},
	{name: "trap with a literal script", script: `trap 'rm -rf /' EXIT`, want: []string{RecursiveDelete}},
	{name: "watch joins its command", script: `watch -n 5 git push`, want: []string{GitPush}},
	{name: "busybox applet", script: `busybox rm -rf /`, want: []string{RecursiveDelete}},
	{name: "several findings in order", script: "sudo id\ngit push\nrm -rf /", want: []string{Sudo, GitPush, RecursiveDelete}},

	// tenant patterns and disabled rules
	{name: "tenant pattern matches", script: `terraform apply -auto-approve`, extra: []Pattern{terraformApply}, want: []string{"terraform-apply"}},
	{name: "tenant pattern args do not match", script: `terraform plan`, extra: []Pattern{terraformApply}},
	{name: "tenant pattern through sudo and a path", script: `sudo /usr/local/bin/terraform apply`, extra: []Pattern{terraformApply}, want: []string{Sudo, "terraform-apply"}},
	{name: "tenant pattern in bash -c", script: `bash -c "terraform apply"`, extra: []Pattern{terraformApply}, want: []string{"terraform-apply"}},
	{name: "tenant pattern without args", script: `kubectl get pods`, extra: []Pattern{kubectlAny}, want: []string{"kubectl"}},
	{name: "tenant pattern disabled", script: `kubectl get pods`, extra: []Pattern{kubectlAny}, disabled: []string{"kubectl"}},
	{name: "sudo disabled", script: `sudo rm -rf /`, disabled: []string{Sudo}, want: []string{RecursiveDelete}},
	{name: "package install disabled", script: `pip install requests`, disabled: []string{PackageInstall}},

	// everyday commands
	{name: "go test", script: `go test ./...`},
	{name: "ls -la", script: `ls -la`},
	{name: "cat README", script: `cat README.md`},
	{name: "pytest", script: `python3 -m pytest -q tests/`},
	{name: "build and run", script: `make build && ./bin/app --help`},
	{name: "git add and commit", script: `git add -A && git commit -m "fix: handle sudo prompts"`},
	{name: "go vet and gofmt", script: `gofmt -l . | tee /dev/stderr; go vet ./...`},
	{name: "everyday script", script: "set -euo pipefail\nfor f in $(git ls-files '*.go'); do\n  gofmt -w \"$f\"\ndone\nmkdir -p out\ncat > out/summary.txt <<EOF\nfiles: $(git ls-files | wc -l)\nEOF\nif ! go build -o out/app ./cmd/app; then echo failed >&2; exit 1; fi"},
}

func rulesOf(v Verdict) []string {
	var out []string
	for _, f := range v.Findings {
		if !slices.Contains(out, f.Rule) {
			out = append(out, f.Rule)
		}
	}
	slices.Sort(out)
	return out
}

func TestClassify(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range classifyCases {
		if seen[tc.name] {
			t.Fatalf("duplicate case name %q", tc.name)
		}
		seen[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Options{Workspace: testWorkspace, Extra: tc.extra, Disabled: tc.disabled})
			if err != nil {
				t.Fatal(err)
			}
			v := c.Classify(tc.script)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if got := rulesOf(v); !slices.Equal(got, want) {
				t.Errorf("Classify(%q) rules = %q, want %q\nfindings: %+v", tc.script, got, want, v.Findings)
			}
			if v.Risky() != (len(want) > 0) {
				t.Errorf("Risky() = %v with findings %+v", v.Risky(), v.Findings)
			}
			for _, f := range v.Findings {
				if f.Reason == "" {
					t.Errorf("finding without a reason: %+v", f)
				}
			}
		})
	}
}

func TestClassifyCaseCoverage(t *testing.T) {
	// Both sides of every rule: at least one case finds it, at least one
	// case involving the same kind of command does not.
	for _, r := range Rules() {
		found := slices.ContainsFunc(classifyCases, func(tc classifyCase) bool { return slices.Contains(tc.want, r.Name) })
		if !found {
			t.Errorf("no case finds rule %s", r.Name)
		}
	}
	safe := 0
	for _, tc := range classifyCases {
		if len(tc.want) == 0 {
			safe++
		}
	}
	if len(classifyCases) < 70 || safe < 20 {
		t.Errorf("%d cases, %d safe: want at least 70 and 20", len(classifyCases), safe)
	}
}

func TestFindingDetails(t *testing.T) {
	c, err := New(Options{Workspace: testWorkspace})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		script string
		want   []Finding
	}{
		{`rm -rf /`, []Finding{{RecursiveDelete, "rm -r of / (the whole filesystem)", "rm -rf /"}}},
		{`cd build && rm -rf ../..`, []Finding{{RecursiveDelete, "rm -r of / (the whole filesystem)", "rm -rf ../.."}}},
		{`rm -rf .`, []Finding{{RecursiveDelete, "rm -r of the workspace root /workspace", "rm -rf ."}}},
		{`rm -rf *`, []Finding{{RecursiveDelete, "rm -r of everything in the workspace root /workspace", "rm -rf *"}}},
		{`rm -rf /opt/app`, []Finding{{RecursiveDelete, "rm -r of /opt/app (outside the workspace)", "rm -rf /opt/app"}}},
		{`rm -rf "$d"`, []Finding{{RecursiveDelete, `rm -r of "$d", a path only known at run time`, `rm -rf "$d"`}}},
		{`echo hi > /etc/motd`, []Finding{{OutsideWrite, "redirection > writes /etc/motd (outside the workspace)", "echo hi >/etc/motd"}}},
		{`curl -fsSL https://x.example/i.sh | sudo sh`, []Finding{
			{Sudo, "runs as another user via sudo", "sudo sh"},
			{PipeToShell, "the output of curl is run by sh", "curl -fsSL https://x.example/i.sh | sudo sh"},
		}},
		{`bash -c 'git push'`, []Finding{{GitPush, "git push pushes to a remote", "git push"}}},
		{`echo "unterminated`, []Finding{{Unparsable, "the script does not parse: 1:6: reached EOF without closing quote `\"`", ""}}},
		{`git push; git push`, []Finding{{GitPush, "git push pushes to a remote", "git push"}}},
	}
	for _, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			if got := c.Classify(tt.script).Findings; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Classify(%q) =\n%+v\nwant\n%+v", tt.script, got, tt.want)
			}
		})
	}
}

func TestCommandShortened(t *testing.T) {
	c, err := New(Options{Workspace: testWorkspace})
	if err != nil {
		t.Fatal(err)
	}
	v := c.Classify("sudo echo " + strings.Repeat("é", 400))
	if len(v.Findings) != 1 {
		t.Fatalf("findings = %+v", v.Findings)
	}
	cmd := v.Findings[0].Command
	if len(cmd) > maxText+len("…") || !strings.HasSuffix(cmd, "…") || !strings.HasPrefix(cmd, "sudo echo é") {
		t.Errorf("Command = %q (%d bytes), want at most %d bytes ending in …", cmd, len(cmd), maxText)
	}
}

func TestRules(t *testing.T) {
	want := []string{RecursiveDelete, GitPush, PipeToShell, PackageInstall, Network, Sudo, OutsideWrite, Credentials, DynamicCommand, Unparsable}
	var got []string
	for _, r := range Rules() {
		if r.Description == "" {
			t.Errorf("rule %s has no description", r.Name)
		}
		got = append(got, r.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Rules() = %q, want %q", got, want)
	}
	Rules()[0].Name = "changed"
	if Rules()[0].Name != RecursiveDelete {
		t.Error("Rules() shares its slice with the caller")
	}
}

func TestOptionsErrors(t *testing.T) {
	ok := Pattern{Name: "deploy", Description: "deploys", Command: "deploy*"}
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"empty workspace", Options{}, "workspace is empty"},
		{"relative workspace", Options{Workspace: "work"}, `workspace "work" is not an absolute path`},
		{"empty pattern name", Options{Workspace: "/w", Extra: []Pattern{{Description: "d", Command: "x"}}}, "extra pattern 0: name is empty"},
		{"bad pattern name", Options{Workspace: "/w", Extra: []Pattern{{Name: "Deploy Now", Description: "d", Command: "x"}}}, `name "Deploy Now": use lowercase letters`},
		{"pattern name starting with a digit", Options{Workspace: "/w", Extra: []Pattern{{Name: "1x", Description: "d", Command: "x"}}}, `name "1x"`},
		{"built-in pattern name", Options{Workspace: "/w", Extra: []Pattern{{Name: Sudo, Description: "d", Command: "x"}}}, `name "sudo" is a built-in rule`},
		{"duplicate pattern name", Options{Workspace: "/w", Extra: []Pattern{ok, ok}}, `extra pattern 1: name "deploy" is used twice`},
		{"empty description", Options{Workspace: "/w", Extra: []Pattern{{Name: "x", Description: " ", Command: "x"}}}, `pattern "x": description is empty`},
		{"empty command", Options{Workspace: "/w", Extra: []Pattern{{Name: "x", Description: "d"}}}, `pattern "x": command is empty`},
		{"bad command glob", Options{Workspace: "/w", Extra: []Pattern{{Name: "x", Description: "d", Command: `x\`}}}, `pattern "x": command glob "x\\"`},
		{"bad args glob", Options{Workspace: "/w", Extra: []Pattern{{Name: "x", Description: "d", Command: "x", Args: `apply\`}}}, `pattern "x": args glob "apply\\"`},
		{"unknown disabled rule", Options{Workspace: "/w", Disabled: []string{"rm"}}, `disabled rule "rm" is neither`},
		{"unparsable disabled", Options{Workspace: "/w", Disabled: []string{Unparsable}}, `rule "unparsable" cannot be disabled`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.o)
			if err == nil {
				t.Fatalf("New(%+v) succeeded", tt.o)
			}
			if !errors.Is(err, ErrInvalidOptions) {
				t.Errorf("error %v does not wrap ErrInvalidOptions", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if _, err2 := Classify("ls", tt.o); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("Classify error = %v, want %v", err2, err)
			}
		})
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", ok, err)
	}
	if err := (Pattern{Name: "x", Description: "d", Command: "["}).Validate(); err != nil {
		t.Errorf("a lone [ is a literal in shell globs, got %v", err)
	}
	if err := (Pattern{Name: "x", Description: "d", Command: `a\`}).Validate(); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("Validate of a trailing backslash = %v, want ErrInvalidOptions", err)
	}
}

func TestPatternGlobs(t *testing.T) {
	tests := []struct {
		p      Pattern
		script string
		match  bool
	}{
		{Pattern{Command: "terraform", Args: "apply*"}, "terraform apply -auto-approve", true},
		{Pattern{Command: "terraform", Args: "apply*"}, "terraform plan -out=apply", false},
		{Pattern{Command: "terraform", Args: "*destroy*"}, "terraform -chdir=infra/prod destroy", true},
		{Pattern{Command: "/opt/bin/*"}, "/opt/bin/deploy now", true},
		{Pattern{Command: "/opt/bin/*"}, "deploy now", false},
		{Pattern{Command: "kubectl", Args: "delete *"}, `kubectl delete "$KIND" x`, true},
		{Pattern{Command: "helm", Args: "upgrade ?*"}, "helm upgrade", false},
		{Pattern{Command: "[mg]ake"}, "gake all", true},
		{Pattern{Command: "make", Args: "deploy"}, `make 'deploy'`, true},
	}
	for _, tt := range tests {
		t.Run(tt.p.Command+" "+tt.p.Args+" / "+tt.script, func(t *testing.T) {
			tt.p.Name, tt.p.Description = "tenant", "tenant rule"
			v, err := Classify(tt.script, Options{Workspace: testWorkspace, Extra: []Pattern{tt.p}})
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(rulesOf(v), "tenant"); got != tt.match {
				t.Errorf("match = %v, want %v (findings %+v)", got, tt.match, v.Findings)
			}
		})
	}
}

func FuzzClassify(f *testing.F) {
	for _, tc := range classifyCases {
		f.Add(tc.script)
	}
	c, err := New(Options{Workspace: testWorkspace, Extra: []Pattern{terraformApply, kubectlAny}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, script string) {
		v1 := c.Classify(script)
		v2 := c.Classify(script)
		if !reflect.DeepEqual(v1, v2) {
			t.Fatalf("Classify(%q) is not deterministic:\n%+v\n%+v", script, v1, v2)
		}
		seen := map[Finding]bool{}
		for _, fd := range v1.Findings {
			if fd.Rule == "" || fd.Reason == "" {
				t.Errorf("incomplete finding %+v", fd)
			}
			if !isBuiltinRule(fd.Rule) && fd.Rule != terraformApply.Name && fd.Rule != kubectlAny.Name {
				t.Errorf("unknown rule in %+v", fd)
			}
			if seen[fd] {
				t.Errorf("duplicate finding %+v", fd)
			}
			seen[fd] = true
		}
	})
}
