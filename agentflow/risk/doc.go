// Package risk classifies a shell script an AI coding agent wants to run
// in its sandbox, so the session can ask a person to approve the risky
// ones in chat before they run.
//
// A [Classifier] parses the script as Bash (mvdan.cc/sh) and visits every
// simple command: in pipelines and lists, subshells and blocks, if, case,
// for and while bodies, function bodies, command substitutions $(...) and
// `...`, process substitutions <(...) and >(...), here-documents fed to a
// shell, and script strings run by another command (bash -c, sh -c, su
// -c, eval, trap, alias, watch, env -S, find -exec sh -c, git's "!"
// aliases), which are parsed in turn. Commands run through a wrapper are
// classified with their wrapper: sudo, doas, pkexec, run0, env, command,
// builtin, exec, nohup, time, timeout, nice, ionice, stdbuf, setsid,
// chroot, busybox, watch -x, xargs (its input becomes arguments only
// known at run time) and find -exec/-execdir/-ok (its {} stands for the
// entries found). An absolute command path counts as its base name
// (/usr/bin/sudo is sudo).
//
// Words are resolved the way the shell would before running anything:
// quotes removed, backslash escapes and $'...' decoded, braces expanded
// ({a,b}, {1..3}). So r\m, 'rm', "rm", r""m and $'\x72m' are all rm.
// Anything only known at run time (parameters, command substitutions,
// arithmetic) makes the word dynamic, which is read conservatively: a
// dynamic command name is a finding, and so is a dynamic path where a
// literal one would be checked (rm -rf "$dir" is a recursive delete of an
// unknown target). A glob is not expanded: "dir/*" is read as everything
// in dir, "dir/*.o" as some entries below dir, and ~ as a home
// directory, which is outside the workspace.
//
// Paths resolve against [Options.Workspace], where the script starts, and
// follow cd, pushd and popd with literal arguments (in the shell running
// them, not past the end of a subshell). After a cd to a directory only
// known at run time, relative paths are dynamic too.
//
// The classifier is a pure function of the script and the options: no
// I/O, no environment, no clock, no goroutines. Findings come in the
// order the commands appear in the script (substitutions before the
// command that uses them), without duplicates, so the same script always
// gives the same verdict; it is safe to call from a Temporal activity or
// workflow.
//
// A script that does not parse is a finding (rule unparsable), never
// safe; so is a script string nested more than eight levels deep, and a
// script too big to classify in bounded time.
//
// # Rules
//
//	Rule              Reported for                                          Examples
//	----------------  ----------------------------------------------------  -------------------------------------------
//	recursive-delete  rm -r/-R/--recursive (any spelling: -rf, -fr, -r -f)  rm -rf /, rm -rf ~, rm -rf ..,
//	                  of the workspace root, everything in it (*, .*,       rm -rf . (at the root), rm -rf *,
//	                  .??*), a path outside the workspace or one only       rm -rf "$dir", xargs rm -rf,
//	                  known at run time; find -delete and find -exec rm -r  find / -name x -delete, find . -delete,
//	                  likewise (find with no test, -mindepth 1 included,    sudo rm -rf /opt/app
//	                  takes everything). Fine: strictly inside the          (fine: rm -rf build, rm -rf /tmp/x,
//	                  workspace, or strictly below /tmp, /var/tmp,          find . -name '*.o' -delete)
//	                  /dev/shm.
//	git-push          git push (and hub push), also after global options    git push, git -C sub push origin main,
//	                  (git -C dir push, git -c k=v push), through a -c      "g""it" push, git -c alias.p=push p,
//	                  alias, git-push, git send-pack, git subtree push,     git $SUB (fine: git push -n,
//	                  and git with a subcommand only known at run time.     git stash push, git commit -m "push it")
//	                  git push --dry-run is fine.
//	pipe-to-shell     Code from a downloader (curl, wget, fetch, aria2c,    curl -fsSL x | sh, wget -qO- x | sudo bash,
//	                  httpie, xh) reaching an interpreter (shells, python,  sh -c "$(curl x)", bash <(curl x),
//	                  perl, ruby, node, php, lua, eval, source): through a  eval "$(curl x)", source <(curl x),
//	                  pipe, a redirection, a command or process             curl -o i.sh x && bash i.sh,
//	                  substitution, or a file the script downloaded first   curl x > i.sh; ./i.sh
//	                  (curl -o/-O, wget, or a redirection of their          (fine: curl x | python3 -c '<json>',
//	                  output). A download read as data is fine.             curl -o x.json url, curl x | jq .)
//	package-install   Installs and upgrades, every one of them, project     apt-get install -y gcc,
//	                  dependencies included: apt, apt-get, aptitude, yum,   pip install -r requirements.txt,
//	                  dnf, zypper, apk, pacman, dpkg -i, rpm -i, nix-env    python3 -m pip install x, npm ci,
//	                  -i, snap, flatpak, brew, port, pip (any version,      npm i -g x, yarn, go install x@latest,
//	                  python -m pip), pipx, uv, poetry, pipenv, conda,      go get x, cargo install x, brew install x
//	                  npm, pnpm, yarn (bare yarn too), bun, go              (fine: pip list, npm test,
//	                  install/get, cargo install/add, gem, bundle,          npm run install, go test ./...)
//	                  composer, nix profile, rustup, gh extension, dotnet,
//	                  cpan, luarocks, asdf, mise, pyenv, nvm ...
//	network           Changes to the sandbox's network configuration, or    ip link set eth0 up, ifconfig eth0 up,
//	                  tunnels out of it: ip add/del/set/..., ifconfig with  iptables -A INPUT ..., nft add rule ...,
//	                  arguments, route add/del,                             ufw allow 22, nmcli con up x,
//	                  iptables/ip6tables/ebtables changes, nft, ufw,        sysctl -w net.ipv4.ip_forward=1,
//	                  firewall-cmd, nmcli, ifup/ifdown, dhclient, tc,       docker network connect n c,
//	                  brctl, sysctl net.*, systemctl and service on         docker run --network host x,
//	                  network services, docker/podman network               tailscale up, ssh -R 80:localhost:80 h
//	                  connect/create/..., --network host, tailscale up,     (fine: ip addr, ip -br a, ifconfig -a,
//	                  wg, openvpn, ngrok, cloudflared tunnel, ssh           iptables -L, curl https://x, git fetch)
//	                  -L/-R/-D/-w. Ordinary traffic is not a finding:
//	                  whether the sandbox reaches the network is its
//	                  policy's concern.
//	sudo              sudo, sudoedit, su, doas, pkexec, run0, by any path.  sudo ls, /usr/bin/sudo -u x id, su -c id,
//	                                                                        doas sh (fine: grep -r sudo .)
//	outside-write     Redirections (>, >>, &>, >|, <>, >&file) and          echo x > /etc/hosts, tee -a ~/.bashrc,
//	                  commands that write, move or delete the paths they    cp x /usr/local/bin/, rm /etc/passwd,
//	                  name (rm, rmdir, unlink, shred, touch, mkdir, tee,    mv x ../y, dd of=/dev/sda,
//	                  truncate, mkfifo, cp, mv (both ends), install, ln,    chmod 777 /etc, sed -i s/a/b/ /etc/x,
//	                  rsync, chmod, chown, chgrp, dd of=, sed -i, perl -i,  tar -xf a.tar -C /, cd /etc && touch x,
//	                  tar -C/-f, unzip -d, curl -o, wget -O/-P, git clone   echo x > "$f"
//	                  DIR, go build -o, sudoedit) outside the workspace,    (fine: > out.txt, 2>/dev/null, >&2,
//	                  or at a path only known at run time. A destination    > /tmp/x, cp a b, cp x /tmp/,
//	                  given with -t or a trailing slash is a directory the  mkdir -p build/x, touch /tmp/stamp)
//	                  files land in. Allowed: the workspace (root
//	                  included); strictly below /tmp, /var/tmp and
//	                  /dev/shm; /dev/null, /dev/stdout, /dev/stderr,
//	                  /dev/tty, /dev/zero, /dev/fd/*.
//	credentials       Any word (argument, assignment value, redirection     cat ~/.ssh/id_rsa, cp .env /tmp/,
//	                  target; also inside a longer word such as --key=...   scp -i key.pem x h:, cat /etc/shadow,
//	                  or a python -c string, where in a word with spaces    cat $HOME/.aws/credentials,
//	                  only tokens with a slash count) naming a credential   echo x >> ~/.netrc,
//	                  file: anything in .ssh, .gnupg, .aws, .azure,         KUBECONFIG=~/.kube/config kubectl get po
//	                  .password-store; id_rsa*, id_ed25519* ...; .netrc,    (fine: cat .env.example,
//	                  .git-credentials, .npmrc, .pypirc, .pgpass, .my.cnf,  git commit -m "drop .env")
//	                  .vault-token, .docker/config.json, .kube/config,
//	                  gh/hosts.yml, .config/gcloud, .cargo/credentials,
//	                  /etc/shadow, /etc/sudoers, /run/secrets,
//	                  /proc/*/environ; *.pem, *.key, *.p12, *.pfx, *.jks,
//	                  *.ppk; .env and .env.* but not .env.example,
//	                  .sample, .template, .dist.
//	dynamic-command   The command name, or a script string given to a       $CMD -rf /, "$@", $(echo rm) -rf x,
//	                  shell, eval, su -c, trap or watch, is only known at   bash -c "$script", eval "$x",
//	                  run time (a download instead is pipe-to-shell).       trap "rm -rf $tmp" EXIT
//	unparsable        The script, or a script string inside it, does not    echo "unterminated, if then fi,
//	                  parse as Bash, nests more than eight levels, or       bash -c 'for'
//	                  needs more than 20000 steps to classify (find -exec
//	                  chains multiply).
//
// Tenants add their own rules with [Pattern] (a glob on the command name
// and one on its joined arguments) and switch built-in rules off with
// [Options.Disabled].
//
// The classifier reads the script, not the programs it runs: what a
// Makefile, a Python program, an npm script or a function defined
// elsewhere does is not seen; variables are not tracked (X=/; rm -rf $X is
// found because $X is dynamic, not because X is /); aliases and functions
// that shadow commands are not followed. It is a tripwire in front of a
// person, not a sandbox.
package risk
