package risk

import (
	"slices"
	"strings"
)

// network reports changes to the sandbox's network configuration and
// tunnels. Ordinary traffic (curl, git fetch, go mod download) is not a
// finding: whether the sandbox may reach the network at all is the
// sandbox policy's business, not the command's.
func (w *walker) network(base string, args []*field, text string) {
	ops := parseArgs(args, optSpec{}).operands
	anyOp := func(words ...string) string {
		for _, o := range ops {
			if !o.dyn && slices.Contains(words, o.val) {
				return o.val
			}
		}
		return ""
	}
	reason := ""
	switch base {
	case "ip":
		// ip's options are whole words (-br is brief, not -b -r).
		if slices.ContainsFunc(args, func(f *field) bool { return f.val == "-b" || f.val == "-batch" || f.val == "--batch" }) {
			reason = "ip -batch changes network configuration"
		} else if v := anyOp("add", "del", "delete", "set", "change", "replace", "flush", "append", "prepend", "exec", "attach", "up", "down"); v != "" && len(ops) > 1 {
			reason = "ip " + ops[0].val + " " + v + " changes network configuration"
		}
	case "ifconfig":
		if len(ops) >= 2 {
			reason = "ifconfig changes an interface"
		}
	case "route":
		if v := anyOp("add", "del", "delete", "flush", "change"); v != "" {
			reason = "route " + v + " changes the routing table"
		}
	case "ifup", "ifdown", "dhclient", "dhcpcd", "udhcpc", "wpa_supplicant", "hostapd", "openvpn", "ngrok", "chisel",
		"iptables-restore", "ip6tables-restore", "nft-restore":
		reason = base + " changes network configuration or opens a tunnel"
	case "iptables", "ip6tables", "iptables-legacy", "ip6tables-legacy", "iptables-nft", "ip6tables-nft", "ebtables", "arptables":
		for _, a := range args {
			v := a.val
			if strings.HasPrefix(v, "--") {
				switch v {
				case "--append", "--delete", "--insert", "--replace", "--flush", "--zero", "--new-chain", "--delete-chain", "--policy", "--rename-chain":
					reason = base + " " + v + " changes the firewall"
				}
			} else if strings.HasPrefix(v, "-") && strings.ContainsAny(v[1:], "ADIRFZNXPE") {
				reason = base + " " + v + " changes the firewall"
			}
			if reason != "" {
				break
			}
		}
	case "nft":
		if v := anyOp("add", "create", "insert", "replace", "delete", "destroy", "flush", "reset", "rename", "import"); v != "" {
			reason = "nft " + v + " changes the firewall"
		} else if parseArgs(args, optSpec{}).has("-f", "--file") {
			reason = "nft -f loads firewall rules"
		}
	case "ufw":
		if v := anyOp("enable", "disable", "reset", "allow", "deny", "reject", "limit", "delete", "insert", "prepend", "route", "default", "reload", "logging"); v != "" {
			reason = "ufw " + v + " changes the firewall"
		}
	case "firewall-cmd":
		for _, a := range args {
			for _, prefix := range []string{"--add-", "--remove-", "--set-", "--change-", "--new-", "--delete-", "--reload", "--complete-reload", "--panic-on", "--runtime-to-permanent"} {
				if strings.HasPrefix(a.val, prefix) && reason == "" {
					reason = "firewall-cmd " + a.val + " changes the firewall"
				}
			}
		}
	case "nmcli":
		if v := anyOp("up", "down", "add", "modify", "delete", "connect", "disconnect", "set", "on", "off", "reload", "load", "import", "reapply"); v != "" {
			reason = "nmcli " + v + " changes network configuration"
		}
	case "brctl", "tc":
		if v := anyOp("add", "del", "delete", "change", "replace", "addbr", "delbr", "addif", "delif"); v != "" {
			reason = base + " " + v + " changes network configuration"
		}
	case "sysctl":
		for _, a := range args {
			if strings.HasPrefix(a.val, "net.") && strings.Contains(a.val, "=") {
				reason = "sysctl " + a.val + " changes network settings"
				break
			}
		}
		if reason == "" && parseArgs(args, optSpec{}).has("-p", "--load", "--system") {
			reason = "sysctl loads kernel settings, network ones included"
		}
	case "systemctl", "service":
		verb := anyOp("start", "stop", "restart", "reload", "enable", "disable", "mask", "unmask", "try-restart", "reload-or-restart")
		for _, o := range ops {
			unit := strings.TrimSuffix(o.val, ".service")
			for _, n := range []string{"NetworkManager", "networking", "network", "systemd-networkd", "systemd-resolved", "wpa_supplicant", "dhcpcd", "firewalld", "ufw", "nftables", "iptables", "tailscaled", "openvpn", "wg-quick"} {
				if (unit == n || strings.HasPrefix(unit, n+"@")) && (verb != "" || base == "service") {
					reason = base + " " + strings.TrimSpace(verb+" "+o.val) + " changes network services"
				}
			}
		}
	case "docker", "podman", "nerdctl":
		if len(ops) >= 2 && ops[0].val == "network" && slices.Contains([]string{"connect", "disconnect", "create", "rm", "remove", "prune"}, ops[1].val) {
			reason = base + " network " + ops[1].val + " changes container networking"
			break
		}
		for i, a := range args {
			v := a.val
			if v == "--network=host" || v == "--net=host" || ((v == "--network" || v == "--net") && i+1 < len(args) && args[i+1].val == "host") {
				reason = base + " with host networking"
				break
			}
		}
	case "tailscale":
		if v := anyOp("up", "login", "set", "funnel", "serve"); v != "" {
			reason = "tailscale " + v + " connects the sandbox to a network"
		}
	case "wg-quick":
		if v := anyOp("up"); v != "" {
			reason = "wg-quick up opens a VPN"
		}
	case "wg":
		if v := anyOp("set", "setconf", "addconf", "syncconf"); v != "" {
			reason = "wg " + v + " changes a VPN"
		}
	case "cloudflared":
		if anyOp("tunnel") != "" {
			reason = "cloudflared tunnel opens a tunnel"
		}
	case "ssh":
		for _, a := range args {
			v := a.val
			if strings.HasPrefix(v, "-") && !strings.HasPrefix(v, "--") && strings.ContainsAny(v[1:], "RLDw") {
				// Only forwarding flags, not values: -L is never a value.
				reason = "ssh " + v + " opens a tunnel"
				break
			}
		}
	}
	if reason != "" {
		w.report(Network, reason, text)
	}
}
