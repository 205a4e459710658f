package main

import "github.com/agentbot/agentbot/internal/benchreport"

// plot writes the scaling runs' charts to one PNG.
func (r *report) plot(path string) error {
	if len(r.charts) == 0 {
		return nil
	}
	var charts []benchreport.Chart
	for _, c := range r.charts {
		bc := benchreport.Chart{Title: c.Title, XLabel: c.XLabel, YLabel: c.YLabel, Target: c.Target}
		for _, s := range c.Series {
			bc.Series = append(bc.Series, benchreport.Series{Name: s.Name, X: s.X, Y: s.Y})
		}
		charts = append(charts, bc)
	}
	return benchreport.WritePNG(path, charts, 700*len(charts), 480)
}
