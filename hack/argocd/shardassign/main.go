// Command shardassign answers, with a release's own code, which application-controller shard
// manages each cluster: the oracle of wavegate's conformance test (tests/offline/shards.rs)
// for src/clusters/shard.rs.
//
// Each stdin line is one cluster set: Argo CD's cluster Secrets, whether argocd-cm enables the
// in-cluster cluster, and the Applications' destination servers. The Secrets go into a fake API
// server and come back through util/db's ListClusters (SecretToCluster, the local in-cluster
// cluster added when no Secret names it), exactly the list the application-controller hands to
// controller/sharding's ClusterSharding.Init. Then, for every requested algorithm and replica
// count, NewClusterSharding + Init build the distribution, and IsManagedCluster is asked for every
// shard the controller could run as (only 0 when replicas <= 1: GetClusterSharding). Nothing of
// the sharding is rebuilt here. One JSON line answers each input line.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/argoproj/argo-cd/v3/controller/sharding"
	"github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v3/util/db"
	"github.com/argoproj/argo-cd/v3/util/settings"
	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

const namespace = "argocd"

type secretIn struct {
	Name        string            `json:"name"`
	UID         string            `json:"uid"`
	Annotations map[string]string `json:"annotations"`
	// Data as the Secret carries it, decoded (the fake API server stores bytes as given).
	Data map[string]string `json:"data"`
}

type caseIn struct {
	InClusterEnabled bool       `json:"inClusterEnabled"`
	Secrets          []secretIn `json:"secrets"`
	// One destination server per Application.
	Apps       []string `json:"apps"`
	Algorithms []string `json:"algorithms"`
	Replicas   []int    `json:"replicas"`
}

type clusterOut struct {
	ID     string `json:"id"`
	Server string `json:"server"`
	Shard  *int64 `json:"shard"`
}

type resultOut struct {
	Algorithm    string         `json:"algorithm"`
	Replicas     int            `json:"replicas"`
	Distribution map[string]int `json:"distribution"`
	// Server -> the shards whose IsManagedCluster is true, ascending.
	ManagedBy map[string][]int `json:"managedBy"`
}

type caseOut struct {
	Clusters []clusterOut `json:"clusters"`
	Results  []resultOut  `json:"results"`
	Error    string       `json:"error,omitempty"`
}

func main() {
	// ClusterSharding logs every assignment at info level; only the answers go to stdout.
	log.SetLevel(log.ErrorLevel)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c caseIn
		var answer caseOut
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			answer.Error = err.Error()
		} else if answer, err = run(c); err != nil {
			answer.Error = err.Error()
		}
		if err := out.Encode(answer); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(c caseIn) (caseOut, error) {
	part := map[string]string{"app.kubernetes.io/part-of": "argocd"}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "argocd-cm", Namespace: namespace, Labels: part},
		Data:       map[string]string{},
	}
	if !c.InClusterEnabled {
		cm.Data["cluster.inClusterEnabled"] = "false"
	}
	objects := []runtime.Object{cm, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: namespace, Labels: part},
		Data:       map[string][]byte{"server.secretkey": []byte("test")},
	}}
	for _, s := range c.Secrets {
		data := map[string][]byte{}
		for k, v := range s.Data {
			data[k] = []byte(v)
		}
		objects = append(objects, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: s.Name, Namespace: namespace, UID: types.UID(s.UID),
				Labels:      map[string]string{"argocd.argoproj.io/secret-type": "cluster"},
				Annotations: s.Annotations,
			},
			Data: data,
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := fake.NewClientset(objects...)
	mgr := settings.NewSettingsManager(ctx, client, namespace)
	clusters, err := db.NewDB(namespace, mgr, client).ListClusters(ctx)
	if err != nil {
		return caseOut{}, err
	}
	apps := &v1alpha1.ApplicationList{}
	for i, server := range c.Apps {
		apps.Items = append(apps.Items, v1alpha1.Application{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i), Namespace: namespace},
			Spec:       v1alpha1.ApplicationSpec{Destination: v1alpha1.ApplicationDestination{Server: server}},
		})
	}
	answer := caseOut{Clusters: []clusterOut{}, Results: []resultOut{}}
	for _, cl := range clusters.Items {
		answer.Clusters = append(answer.Clusters, clusterOut{ID: cl.ID, Server: cl.Server, Shard: cl.Shard})
	}
	sort.Slice(answer.Clusters, func(i, j int) bool { return answer.Clusters[i].Server < answer.Clusters[j].Server })
	for _, algorithm := range c.Algorithms {
		for _, replicas := range c.Replicas {
			shards := 1 // GetClusterSharding: replicas <= 1 runs as shard 0
			if replicas > 1 {
				shards = replicas
			}
			// Each shard's controller builds its own cache; the distribution must not depend on
			// which one asks, so every shard's is computed and compared.
			result := resultOut{Algorithm: algorithm, Replicas: replicas, ManagedBy: map[string][]int{}}
			for shard := range shards {
				cache := sharding.NewClusterSharding(nil, shard, replicas, algorithm)
				cache.Init(clusters.DeepCopy(), apps.DeepCopy())
				distribution := cache.GetDistribution()
				if result.Distribution == nil {
					result.Distribution = distribution
				} else if fmt.Sprint(distribution) != fmt.Sprint(result.Distribution) {
					return caseOut{}, fmt.Errorf("%s with %d replicas: shard %d computes %v, shard 0 %v", algorithm, replicas, shard, distribution, result.Distribution)
				}
				for i := range clusters.Items {
					cl := clusters.Items[i]
					if _, ok := result.ManagedBy[cl.Server]; !ok {
						result.ManagedBy[cl.Server] = []int{}
					}
					if cache.IsManagedCluster(&cl) {
						result.ManagedBy[cl.Server] = append(result.ManagedBy[cl.Server], shard)
					}
				}
			}
			answer.Results = append(answer.Results, result)
		}
	}
	return answer, nil
}
