// Dry run of a declarative Jenkinsfile without Jenkins.
//
//   groovy dry_run.groovy Jenkinsfile [NAME=VALUE ...]     (job parameters)
//
// Every DSL call (pipeline, stage, sh, junit, timeout, ...) is printed as one JSON line,
// {"step", "args", "path"}, where path is the chain of enclosing blocks; closures run with
// this script as their delegate, in file order. Parameters take their declared defaults
// unless given; `environment` assignments are recorded as `env` steps; a `matrix` runs its
// agent, stages and post once per combination of axis values, with each value bound to
// the axis name (Jenkins exports them as variables). Nothing is executed: `sh` only records.
import groovy.json.JsonOutput

class DryRun {
    Binding binding
    Script script
    List<String> path = []
    Map given

    void emit(String step, List args) {
        println JsonOutput.toJson([step: step, args: args.collect { plain(it) }, path: new ArrayList(path)])
    }

    static Object plain(Object value) {
        if (value instanceof Map) return value.collectEntries { k, v -> [(k.toString()): plain(v)] }
        if (value instanceof List) return value.collect { plain(it) }
        if (value instanceof Number || value instanceof Boolean || value == null) return value
        return value.toString()
    }

    Object step(String name, Object[] args) {
        List plainArgs = args.findAll { !(it instanceof Closure) } as List
        if (name in ['string', 'booleanParam', 'choice'] && plainArgs && plainArgs[0] instanceof Map) declare(plainArgs[0])
        emit(name, plainArgs)
        Closure body = args.find { it instanceof Closure }
        if (body == null) return "${name}(${plainArgs.collect { plain(it) }.join(', ')})".toString()
        String label = plainArgs && plainArgs[0] instanceof CharSequence ? "${name}:${plainArgs[0]}" : name
        if (name == 'matrix') return matrix(body)
        if (name == 'environment') return inside(label, body, new EnvBlock(this))
        return inside(label, body, null)
    }

    void declare(Map parameter) {
        Map params = binding.getVariable('params')
        String key = parameter.name
        params[key] = given.containsKey(key) ? given[key] : parameter.defaultValue
    }

    Object inside(String label, Closure body, Object delegate) {
        path.push(label)
        try {
            body.delegate = delegate ?: script
            body.resolveStrategy = Closure.DELEGATE_FIRST
            return body.call()
        } finally {
            path.pop()
        }
    }

    Object matrix(Closure body) {
        MatrixBlock spec = new MatrixBlock()
        inside('matrix', body, spec)
        List<Map> cells = [[:]]
        spec.axes.each { axis -> cells = cells.collectMany { cell -> axis.values.collect { v -> cell + [(axis.name): v] } } }
        cells.each { cell ->
            cell.each { k, v -> binding.setVariable(k, v); binding.getVariable('env')[k] = v }
            String label = 'cell:' + cell.collect { k, v -> "${k}=${v}" }.join(',')
            spec.blocks.each { block -> inside(label, { this.step(block.name, block.args as Object[]) }, this) }
        }
        return null
    }
}

// Inside `environment { NAME = value }`: assignments are recorded and exported.
class EnvBlock {
    DryRun run
    EnvBlock(DryRun run) { this.run = run }
    void setProperty(String name, Object value) {
        run.binding.getVariable('env')[name] = value.toString()
        run.emit('env', [name, value])
    }
    Object getProperty(String name) { run.binding.getVariable(name) }
}

// Inside `matrix { ... }`: axes are collected; agent, stages, post and options are kept
// to run per cell.
class MatrixBlock {
    List<Map> axes = []
    List<Map> blocks = []
    Map current
    Object axes(Closure body) { body.delegate = this; body.resolveStrategy = Closure.DELEGATE_FIRST; body.call() }
    Object axis(Closure body) {
        current = [name: null, values: []]
        axes << current
        body.delegate = this
        body.resolveStrategy = Closure.DELEGATE_FIRST
        body.call()
    }
    void name(String value) { current.name = value }
    void values(Object[] values) { current.values = values as List }
    Object methodMissing(String name, Object args) { blocks << [name: name, args: args as List]; null }
}

String jenkinsfile = args[0]
Map given = args.drop(1).collectEntries { it.split('=', 2) as List }
Binding binding = new Binding([params: [:], env: [:]])
DryRun dry = new DryRun(binding: binding, given: given)
Script script = new GroovyShell(binding).parse(new File(jenkinsfile))
dry.script = script
script.metaClass.methodMissing = { String name, Object args -> dry.step(name, args as Object[]) }
// Bare words such as `agent none` read as properties.
script.metaClass.propertyMissing = { String name -> name }
script.run()
