package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// importerMain is a program of another module that uses jobwatch as a
// library: the client and the generated code.
const importerMain = `package main

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jobwatch/jobwatch/client"
	jobwatchv1 "github.com/jobwatch/jobwatch/gen/jobwatch/v1"
	"github.com/jobwatch/jobwatch/gen/jobwatch/v1/jobwatchv1connect"
)

func main() {
	c := client.New(os.Args[1])
	defer c.Close()
	job, err := c.Submit(context.Background(), &jobwatchv1.SubmitJobRequest{Kind: "imported"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(jobwatchv1connect.JobServiceName, job.GetId())
}
`

// TestAnotherModuleCanImportTheClient builds, in a module of its own
// that points at this checkout with a replace directive, a program that
// imports client/ and gen/, and runs it against a server. It builds
// offline: the modules it needs are the ones this module's build already
// put in the module cache, and go.sum is this module's.
func TestAnotherModuleCanImportTheClient(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if goVersion == nil {
		t.Fatal("go.mod has no go directive")
	}
	// The importer requires what this module requires, at the same
	// versions, as `go get` of the client would leave it: so go reads the
	// same go.mod files this module's build read, all in the module cache
	// already, and none of the older ones a graph resolved afresh would
	// ask for.
	var requires []byte
	for _, m := range regexp.MustCompile(`(?ms)^require \(.*?^\)\n`).FindAll(mod, -1) {
		requires = append(requires, m...)
	}
	if len(requires) == 0 {
		t.Fatal("go.mod has no require block")
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/importer\n\ngo " + string(goVersion[1]) + "\n\n" +
			"require github.com/jobwatch/jobwatch v0.0.0\n\n" + string(requires) + "\n" +
			"replace github.com/jobwatch/jobwatch => " + root + "\n",
		"go.sum":  string(sum),
		"main.go": importerMain,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "importer")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = dir
	// -mod=mod lets go fill in the requirements go.mod leaves out;
	// GOPROXY=off keeps it from fetching anything, so a dependency this
	// module's own build did not already need fails here, on CI too.
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("another module cannot build a program that imports jobwatch: %v\n%s", err, out)
	}

	s := startCLIServer(t, time.Second)
	out, err := exec.CommandContext(ctx, bin, s.URL).Output()
	if err != nil {
		t.Fatalf("the importing program failed: %v", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 || f[0] != "jobwatch.v1.JobService" {
		t.Fatalf("the importing program printed %q, want the service name and a job id", out)
	}
	if j, err := s.Client.Get(ctx, f[1]); err != nil || j.GetKind() != "imported" {
		t.Fatalf("the job it submitted = %v, %v", j, err)
	}
}
