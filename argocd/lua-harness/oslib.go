package luaharness

import (
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// Argo CD's safe os library offers only time and date (util/lua/oslib_safe.go).
var safeOsFuncs = map[string]lua.LGFunction{
	"time": osTime,
	"date": osDate,
}

// openSafeOs reproduces Argo CD's OpenSafeOs, including where it registers: under "table",
// which OpenTable has already loaded, so RegisterModule returns the table library unchanged and
// no global `os` appears. Scripts that need time must `require("os")`.
func openSafeOs(l *lua.LState) int {
	l.Push(l.RegisterModule(lua.TabLibName, safeOsFuncs))
	return 1
}

// safeOsLoader backs `require("os")`.
func safeOsLoader(l *lua.LState) int {
	l.Push(l.SetFuncs(l.NewTable(), safeOsFuncs))
	return 1
}

func osTime(l *lua.LState) int {
	if l.GetTop() == 0 {
		l.Push(lua.LNumber(time.Now().Unix()))
		return 1
	}
	tb := l.CheckTable(1)
	field := func(name string, def int) int {
		if n, ok := tb.RawGetString(name).(lua.LNumber); ok {
			return int(n)
		}
		return def
	}
	t := time.Date(field("year", -1), time.Month(field("month", -1)), field("day", -1),
		field("hour", 12), field("min", 0), field("sec", 0), 0, time.Local)
	l.Push(lua.LNumber(t.Unix()))
	return 1
}

// strftime flags mapped to Go layouts, enough for the formats health scripts use.
var dateLayouts = map[byte]string{
	'Y': "2006", 'y': "06", 'm': "01", 'd': "02", 'H': "15", 'M': "04", 'S': "05",
	'F': "2006-01-02", 'T': "15:04:05", 'z': "-0700", 'Z': "MST", 'b': "Jan", 'a': "Mon",
}

func osDate(l *lua.LState) int {
	t := time.Now()
	format := "%c"
	if l.GetTop() >= 1 {
		format = l.CheckString(1)
	}
	if strings.HasPrefix(format, "!") {
		t = t.UTC()
		format = format[1:]
	}
	if l.GetTop() >= 2 {
		t = time.Unix(l.CheckInt64(2), 0)
	}
	if strings.HasPrefix(format, "*t") {
		tb := l.NewTable()
		for k, v := range map[string]int{"year": t.Year(), "month": int(t.Month()), "day": t.Day(),
			"hour": t.Hour(), "min": t.Minute(), "sec": t.Second(), "wday": int(t.Weekday()) + 1} {
			tb.RawSetString(k, lua.LNumber(v))
		}
		l.Push(tb)
		return 1
	}
	var out strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			out.WriteByte(format[i])
			continue
		}
		i++
		switch c := format[i]; {
		case c == '%':
			out.WriteByte('%')
		case c == 'c':
			out.WriteString(t.Format("Mon Jan  2 15:04:05 2006"))
		case dateLayouts[c] != "":
			out.WriteString(t.Format(dateLayouts[c]))
		default:
			out.WriteByte('%')
			out.WriteByte(c)
		}
	}
	l.Push(lua.LString(out.String()))
	return 1
}
