package benchreport

import "testing"

func TestTable(t *testing.T) {
	tests := []struct {
		name           string
		table          Table
		markdown, text string
	}{
		{
			name: "numeric columns right-aligned, notes below",
			table: Table{
				Title:   "Cold start",
				Columns: []string{"backend", "p50 (s)", "ratio"},
				Rows: [][]string{
					{"docker", "1.25", "1.00x"},
					{"e2b", "0.4", "-"},
					{"daytona", "12.5", "10.00x"},
				},
				Notes: []string{"5 runs each", "ratio against docker"},
			},
			markdown: "" +
				"### Cold start\n" +
				"\n" +
				"| backend | p50 (s) |  ratio |\n" +
				"|---------|--------:|-------:|\n" +
				"| docker  |    1.25 |  1.00x |\n" +
				"| e2b     |     0.4 |      - |\n" +
				"| daytona |    12.5 | 10.00x |\n" +
				"\n" +
				"- 5 runs each\n" +
				"- ratio against docker\n",
			text: "" +
				"Cold start\n" +
				"==========\n" +
				"backend  p50 (s)   ratio\n" +
				"-------  -------  ------\n" +
				"docker      1.25   1.00x\n" +
				"e2b          0.4       -\n" +
				"daytona     12.5  10.00x\n" +
				"\n" +
				"- 5 runs each\n" +
				"- ratio against docker\n",
		},
		{
			name: "pipes escaped, line breaks kept out of the grid",
			table: Table{
				Columns: []string{"cmd", "n"},
				Rows:    [][]string{{"a|b", "1"}, {"two\nlines", "<2"}},
			},
			markdown: "" +
				"| cmd          |   n |\n" +
				"|--------------|----:|\n" +
				"| a\\|b         |   1 |\n" +
				"| two<br>lines |  <2 |\n",
			text: "" +
				"cmd         n\n" +
				"---------  --\n" +
				"a|b         1\n" +
				"two lines  <2\n",
		},
		{
			name: "ragged rows and text in a number column",
			table: Table{
				Columns: []string{"a", "b"},
				Rows:    [][]string{{"x", "1", "extra"}, {"y", "v1.2"}, {"z"}},
			},
			markdown: "" +
				"| a   | b    |       |\n" +
				"|-----|------|-------|\n" +
				"| x   | 1    | extra |\n" +
				"| y   | v1.2 |       |\n" +
				"| z   |      |       |\n",
			text: "" +
				"a  b\n" +
				"-  ----  -----\n" +
				"x  1     extra\n" +
				"y  v1.2\n" +
				"z\n",
		},
		{
			name: "placeholders only do not make a column numeric",
			table: Table{
				Columns: []string{"v"},
				Rows:    [][]string{{"-"}, {""}},
			},
			markdown: "" +
				"| v   |\n" +
				"|-----|\n" +
				"| -   |\n" +
				"|     |\n",
			text: "" +
				"v\n" +
				"-\n" +
				"-\n" +
				"\n",
		},
		{
			name:     "notes only",
			table:    Table{Title: "Nothing ran", Notes: []string{"first line\nsecond line"}},
			markdown: "### Nothing ran\n\n- first line\n  second line\n",
			text:     "Nothing ran\n===========\n\n- first line\n  second line\n",
		},
		{
			name:     "empty",
			table:    Table{},
			markdown: "",
			text:     "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.table.Markdown(); got != tt.markdown {
				t.Errorf("Markdown() =\n%s\nwant\n%s", got, tt.markdown)
			}
			if got := tt.table.Text(); got != tt.text {
				t.Errorf("Text() =\n%s\nwant\n%s", got, tt.text)
			}
		})
	}
}

func TestLooksNumeric(t *testing.T) {
	tests := []struct {
		cell string
		want bool
	}{
		{"12", true},
		{"1.5x", true},
		{".5", true},
		{"-3%", true},
		{"−3", true},
		{"+0.1", true},
		{"~40 ms", true},
		{"≥ 2", false}, // a space after the sign reads as prose
		{"v1.2", false},
		{"x2", false},
		{"-", false},
		{"٣", false}, // only ASCII digits
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.cell, func(t *testing.T) {
			if got := looksNumeric(tt.cell); got != tt.want {
				t.Errorf("looksNumeric(%q) = %v, want %v", tt.cell, got, tt.want)
			}
		})
	}
}
