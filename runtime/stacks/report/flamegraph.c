/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The flame graph page (flamegraph.h): the folded stacks sorted frame by
 * frame, merged into a tree written in preorder as (depth, name, count)
 * triples with a table of names, and a small script that draws it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "encode/escape.h"
#include "encode/json.h"
#include "hashset.h"
#include "report/flamegraph.h"
#include "report/model.h"
#include "report/pprof.h"

struct fg_line {
	char *s;
	int64_t count;
};

struct fg_name {
	const char *s;
	size_t len;
	uint64_t hash;
};

struct fg_node {
	uint32_t name;
	uint32_t depth;
	int64_t value;
};

struct fg {
	struct fg_line *lines;
	size_t nlines, caplines;
	struct fg_name *names;
	size_t nnames, capnames;
	struct stb_hashset set; /* the names */
	struct fg_node *nodes;
	size_t nnodes, capnodes;
	size_t *path; /* node at each depth of the previous line */
	size_t cappath;
	int64_t total;
};

static int add_line(void *arg, const char *line, int64_t count)
{
	struct fg *g = arg;
	if (count <= 0)
		return 0;
	if (stb_grow(&g->lines, &g->caplines, g->nlines + 1, sizeof(*g->lines)) != 0)
		return -ENOMEM;
	char *s = strdup(line);
	if (!s)
		return -ENOMEM;
	g->lines[g->nlines++] = (struct fg_line){.s = s, .count = count};
	return 0;
}

/* Frame by frame: ';' and the end sort before any other byte, so that the
 * lines under one frame are contiguous. */
static int line_cmp(const void *x, const void *y)
{
	const unsigned char *a = (const unsigned char *)((const struct fg_line *)x)->s;
	const unsigned char *b = (const unsigned char *)((const struct fg_line *)y)->s;
	for (;; a++, b++) {
		unsigned ca = *a == ';' ? 1u : *a ? *a + 1u : 0u;
		unsigned cb = *b == ';' ? 1u : *b ? *b + 1u : 0u;
		if (ca != cb)
			return ca < cb ? -1 : 1;
		if (!ca)
			return 0;
	}
}

/* The names, a set of indices into g->names. */
struct fg_key {
	const char *s;
	size_t len;
	uint64_t hash;
};

static uint64_t name_rehash(const void *ctx, uint32_t idx)
{
	const struct fg *g = ctx;
	return g->names[idx].hash;
}

static bool name_eq(const void *ctx, uint32_t idx, const void *key)
{
	const struct fg_name *e = &((const struct fg *)ctx)->names[idx];
	const struct fg_key *k = key;
	return e->hash == k->hash && e->len == k->len && memcmp(e->s, k->s, k->len) == 0;
}

/* The index of name s[0 .. n), interned; -1 on ENOMEM. */
static int64_t intern(struct fg *g, const char *s, size_t n)
{
	if (stb_hashset_reserve(&g->set, g, name_rehash) != 0)
		return -1;
	struct fg_key k = {.s = s, .len = n, .hash = stb_fnv1a64_add(STB_FNV1A64_BASIS, s, n)};
	uint32_t *slot = stb_hashset_find(&g->set, k.hash, g, name_eq, &k);
	if (*slot)
		return *slot - 1;
	if (g->nnames >= UINT32_MAX - 1 ||
	    stb_grow(&g->names, &g->capnames, g->nnames + 1, sizeof(*g->names)) != 0)
		return -1;
	g->names[g->nnames] = (struct fg_name){.s = s, .len = n, .hash = k.hash};
	*slot = (uint32_t)++g->nnames;
	g->set.n++;
	return (int64_t)g->nnames - 1;
}

static int add_node(struct fg *g, uint32_t name, uint32_t depth)
{
	if (stb_grow(&g->nodes, &g->capnodes, g->nnodes + 1, sizeof(*g->nodes)) != 0 ||
	    stb_grow(&g->path, &g->cappath, (size_t)depth + 1, sizeof(*g->path)) != 0)
		return -ENOMEM;
	g->nodes[g->nnodes] = (struct fg_node){.name = name, .depth = depth};
	g->path[depth] = g->nnodes++;
	return 0;
}

/* The tree: node 0 is the root ("all"); each line's frames below it. */
static int build(struct fg *g)
{
	int64_t all = intern(g, "all", 3);
	if (all < 0 || add_node(g, (uint32_t)all, 0) != 0)
		return -ENOMEM;
	size_t plen = 1; /* nodes of the previous line's path, root included */
	for (size_t i = 0; i < g->nlines; i++) {
		const char *s = g->lines[i].s;
		size_t depth = 1;
		bool diverged = false;
		for (const char *p = s;; depth++) {
			const char *e = strchr(p, ';');
			size_t n = e ? (size_t)(e - p) : strlen(p);
			int64_t name = intern(g, p, n);
			if (name < 0 || depth >= UINT32_MAX)
				return -ENOMEM;
			if (diverged || depth >= plen || g->nodes[g->path[depth]].name != name) {
				diverged = true;
				if (add_node(g, (uint32_t)name, (uint32_t)depth) != 0)
					return -ENOMEM;
			}
			g->nodes[g->path[depth]].value += g->lines[i].count;
			if (!e)
				break;
			p = e + 1;
		}
		plen = depth + 1;
		g->nodes[0].value += g->lines[i].count;
	}
	g->total = g->nodes[0].value;
	return 0;
}

static const char fg_style[] =
	"body{font:13px sans-serif;margin:12px;color:#222;background:#fff}"
	"h1{font-size:17px;margin:0 0 4px}p{margin:2px 0}"
	"#fg-bar{margin:8px 0;display:flex;gap:8px;align-items:center}"
	"#fg-search{width:22em}#fg-canvas{display:block;width:100%;cursor:pointer}"
	"#fg-tip{position:fixed;display:none;background:#ffffe8;border:1px solid #999;"
	"padding:3px 6px;font:12px monospace;pointer-events:none;max-width:60em;"
	"white-space:pre-wrap;word-break:break-all}"
	".fg-note{color:#555}";

/* Draws the tree of #fg-data: nodes in preorder as (depth, name, value). */
static const char fg_script[] =
	"(function(){'use strict';\n"
	"var D=JSON.parse(document.getElementById('fg-data').textContent);\n"
	"var T=D.nodes,names=D.names,n=T.length/3,H=17;\n"
	"var x=new Float64Array(n),v=new Float64Array(n),dp=new Int32Array(n),\n"
	" nm=new Int32Array(n),end=new Int32Array(n),nx=new Float64Array(n),st=[],md=0;\n"
	"for(var i=0;i<n;i++){var d=T[3*i];dp[i]=d;nm[i]=T[3*i+1];v[i]=T[3*i+2];\n"
	" if(d>md)md=d;while(st.length>d)end[st.pop()]=i;\n"
	" if(d>0){var p=st[d-1];x[i]=nx[p];nx[p]+=v[i];}nx[i]=x[i];st.push(i);}\n"
	"while(st.length)end[st.pop()]=n;\n"
	"var cv=document.getElementById('fg-canvas'),cx=cv.getContext('2d'),\n"
	" tip=document.getElementById('fg-tip'),stat=document.getElementById('fg-status'),\n"
	" q=document.getElementById('fg-search'),zoom=0,term='',rows=[],W=0;\n"
	"function hue(s){var h=0;for(var k=0;k<s.length;k++)h=(h*31+s.charCodeAt(k))|0;\n"
	" return Math.abs(h);}\n"
	"function color(i){var s=names[nm[i]];if(term&&s.toLowerCase().indexOf(term)>=0)\n"
	" return'#d040d0';if(dp[i]<=1)return dp[i]?'#8fb6d8':'#c8c8c8';var h=hue(s);\n"
	" return'hsl('+(h%50)+','+(60+h%30)+'%,'+(55+h%15)+'%)';}\n"
	"function pct(a,b){return b>0?(100*a/b).toFixed(2)+' %':'-';}\n"
	"function draw(){var r=window.devicePixelRatio||1;W=cv.clientWidth||800;\n"
	" var Hh=(md+1)*H;cv.width=W*r;cv.height=Hh*r;cv.style.height=Hh+'px';\n"
	" cx.setTransform(r,0,0,r,0,0);cx.clearRect(0,0,W,Hh);cx.font='12px monospace';\n"
	" cx.textBaseline='middle';rows=[];for(var k=0;k<=md;k++)rows.push([]);\n"
	" var z=zoom,x0=x[z],s=W/(v[z]||1),drawn=0;\n"
	" for(var i=0;i<n;){var px,w;if(dp[i]<dp[z]){if(x[i]<=x0&&x0<x[i]+v[i]&&i<=z){px=0;w=W;}\n"
	"  else{i=end[i];continue;}}else if(i>=z&&i<end[z]){px=(x[i]-x0)*s;w=v[i]*s;\n"
	"  if(w<0.4){i=end[i];continue;}}else{i=end[i];continue;}\n"
	"  var y=dp[i]*H;cx.fillStyle=color(i);cx.fillRect(px,y,Math.max(w-0.5,0.5),H-1);\n"
	"  rows[dp[i]].push([px,px+w,i]);drawn++;\n"
	"  if(w>24){var c=Math.floor((w-6)/7.3),t=names[nm[i]];if(t.length>c)t=t.slice(0,c-1)+'\\u2026';\n"
	"   cx.fillStyle='#000';cx.fillText(t,px+3,y+H/2);}i++;}\n"
	" var m=0;if(term){for(var i=0;i<n;){if(names[nm[i]].toLowerCase().indexOf(term)>=0)\n"
	"  {m+=v[i];i=end[i];}else i++;}}\n"
	" stat.textContent=(n-1)+' frames, '+drawn+' drawn; '+v[0]+' '+D.unit+\n"
	"  (z?'; zoomed on '+names[nm[z]]+' ('+pct(v[z],v[0])+')':'')+\n"
	"  (term?'; matched '+m+' '+D.unit+' ('+pct(m,v[0])+')':'');\n"
	" document.documentElement.setAttribute('data-fg-drawn',String(drawn));}\n"
	"function at(e){var b=cv.getBoundingClientRect(),mx=e.clientX-b.left,\n"
	" d=Math.floor((e.clientY-b.top)/H);if(d<0||d>=rows.length)return -1;var R=rows[d];\n"
	" for(var k=0;k<R.length;k++)if(mx>=R[k][0]&&mx<R[k][1])return R[k][2];return -1;}\n"
	"cv.addEventListener('mousemove',function(e){var i=at(e);if(i<0){tip.style.display='none';\n"
	" return;}tip.textContent=names[nm[i]]+'\\n'+v[i]+' '+D.unit+', '+pct(v[i],v[0])+\n"
	" (zoom?' of all, '+pct(v[i],v[zoom])+' of the zoomed frame':'');\n"
	" tip.style.display='block';tip.style.left=Math.min(e.clientX+12,window.innerWidth-300)+'px';\n"
	" tip.style.top=(e.clientY+14)+'px';});\n"
	"cv.addEventListener('mouseleave',function(){tip.style.display='none';});\n"
	"cv.addEventListener('click',function(e){var i=at(e);if(i>=0){zoom=i;draw();}});\n"
	"document.getElementById('fg-reset').addEventListener('click',function(){zoom=0;\n"
	" q.value='';term='';draw();});\n"
	"q.addEventListener('input',function(){term=q.value.toLowerCase();draw();});\n"
	"var rt=0;window.addEventListener('resize',function(){clearTimeout(rt);\n"
	" rt=setTimeout(draw,100);});\n"
	"draw();})();\n";

static int meta_line(void *arg, const char *line)
{
	FILE *out = arg;
	fputs("<p class=\"fg-note\">", out);
	stb_html_put(out, line, strlen(line));
	fputs("</p>\n", out);
	return ferror(out) ? -EIO : 0;
}

static int write_page(const struct fg *g, FILE *out, const struct stb_flamegraph_opts *o)
{
	const char *title = o->title ? o->title : "stb flame graph";
	const char *unit = o->unit ? o->unit : "samples";
	fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>",
	      out);
	stb_html_put(out, title, strlen(title));
	fprintf(out, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>", fg_style);
	stb_html_put(out, title, strlen(title));
	fputs("</h1>\n", out);
	int rc = stb_report_meta_lines(o->meta, meta_line, out);
	if (rc != 0)
		return rc;
	fputs("<p class=\"fg-note\">Root at the top, each stack's callers above its callees; "
	      "width is the number of ", out);
	stb_html_put(out, unit, strlen(unit));
	fputs(". Click a frame to zoom in (the root to zoom out); type to highlight "
	      "matching frames.</p>\n"
	      "<div id=\"fg-bar\"><input id=\"fg-search\" type=\"search\" "
	      "placeholder=\"highlight frames containing...\"><button id=\"fg-reset\" "
	      "type=\"button\">reset</button></div>\n"
	      "<p id=\"fg-status\">(the graph needs JavaScript)</p>\n"
	      "<canvas id=\"fg-canvas\"></canvas>\n<div id=\"fg-tip\"></div>\n"
	      "<script type=\"application/json\" id=\"fg-data\">", out);
	struct stb_json j;
	stb_json_init(&j, out);
	j.flags = STB_JSON_F_COMPACT | STB_JSON_F_HTML;
	stb_json_object(&j);
	stb_json_kv_string(&j, "schema", "stb-flamegraph/1");
	stb_json_kv_string(&j, "unit", unit);
	stb_json_kv_i64(&j, "total", g->total);
	stb_json_key(&j, "names");
	stb_json_array(&j);
	for (size_t i = 0; i < g->nnames; i++)
		stb_json_stringn(&j, g->names[i].s, g->names[i].len);
	stb_json_end(&j);
	stb_json_key(&j, "nodes");
	stb_json_array(&j);
	for (size_t i = 0; i < g->nnodes; i++) {
		stb_json_u64(&j, g->nodes[i].depth);
		stb_json_u64(&j, g->nodes[i].name);
		stb_json_i64(&j, g->nodes[i].value);
	}
	stb_json_end(&j);
	stb_json_end(&j);
	rc = stb_json_finish(&j);
	if (rc != 0)
		return rc;
	fprintf(out, "</script>\n<script>\n%s</script>\n</body>\n</html>\n", fg_script);
	return ferror(out) ? -EIO : 0;
}

int stb_flamegraph_write(struct stb_pprof *p, FILE *out, const struct stb_flamegraph_opts *o)
{
	if (!p || !out || !o)
		return -EINVAL;
	struct fg g;
	memset(&g, 0, sizeof(g));
	int rc = stb_pprof_folded_each(p, o->root_key, o->value, add_line, &g);
	if (rc != 0)
		goto cleanup;
	if (g.nlines)
		qsort(g.lines, g.nlines, sizeof(*g.lines), line_cmp);
	rc = build(&g);
	if (rc != 0)
		goto cleanup;
	rc = write_page(&g, out, o);
cleanup:
	for (size_t i = 0; i < g.nlines; i++)
		free(g.lines[i].s);
	free(g.lines);
	free(g.names);
	stb_hashset_free(&g.set);
	free(g.nodes);
	free(g.path);
	return rc;
}
